/* cli: the `forum` command. main.c parses the global options and hands the
 * rest to one of the command groups here. */
#ifndef CLI_H
#define CLI_H

#include <stdio.h>

#include <cJSON.h>

#include "ledger/fo_err.h"
#include "ledger/ledger.h"

struct cli {
    const char *ledger_dir; /* --ledger, $FORUM_LEDGER, ./forum-ledger */
    int json;               /* --json: print the method's result object */
};

/* Command groups: each returns the process exit code (DESIGN §8). */
int cli_ledger(struct cli *c, int argc, char **argv);

/* `forum mcp [--admin]` (cli_mcp.c): the MCP server on stdin/stdout. Exit 0
 * at the end of input, 3 when the ledger cannot be opened. */
int cli_mcp(struct cli *c, int argc, char **argv);

/* `forum docs http|mcp` (cli_docs.c): prints the generated reference page. */
int cli_docs(struct cli *c, int argc, char **argv);

/* Proofs and checkpoints (cli_proof.c): `forum ledger checkpoint | prove |
 * consistency | key | bundle`, `forum verify-bundle`, and the
 * --checkpoint NOTE --vkey KEY path of `forum ledger verify`. */
int cli_ledger_checkpoint(struct cli *c, int argc, char **argv);
int cli_ledger_prove(struct cli *c, int argc, char **argv);
int cli_ledger_consistency(struct cli *c, int argc, char **argv);
int cli_ledger_key(struct cli *c, int argc, char **argv);
int cli_ledger_bundle(struct cli *c, int argc, char **argv);
int cli_verify_bundle(struct cli *c, int argc, char **argv);
int cli_verify_checkpoint(struct cli *c, int deep, const char *note_file,
                          const char *vkey_arg);

/* `forum serve [start|stop|status|logs]` (cli_serve.c). */
int cli_serve(struct cli *c, int argc, char **argv);

/* One HTTP/1.1 request to host:port (Connection: close), for talking to our
 * own daemon. body may be NULL (no body). timeout_ms covers connect and the
 * whole reply. On FO_OK *status is the HTTP status and *out the body
 * (malloc'd, NUL-terminated; the caller frees). */
int cli_http_request(const char *host, int port, const char *method,
                     const char *path, const char *token, const char *body,
                     size_t body_len, int timeout_ms, int *status, char **out,
                     size_t *out_len, struct fo_err *err);

/* The orchestrator's commands (cli_orch.c): `forum roster`, `forum route`,
 * `forum run-plan`, `forum bench A B`. */
int cli_roster(struct cli *c, int argc, char **argv);
int cli_route(struct cli *c, int argc, char **argv);
int cli_run_plan(struct cli *c, int argc, char **argv);
int cli_bench(struct cli *c, int argc, char **argv);

/* The control loop (cli_submit.c): `forum submit REQUEST` and `forum plan
 * REQUEST`, in this process on the ledger dir. */
int cli_submit(struct cli *c, int argc, char **argv);
int cli_plan(struct cli *c, int argc, char **argv);

/* The model-provider flags of serve, mcp, submit and plan:
 * --chat-url URL --model M [--api-key-env VAR], or --api [--model M]
 * [--api-key-env VAR]. */
struct cli_provider {
    const char *chat_url, *model, *key_env;
    int api;
};

struct daemon_config;

/* Checks that the provider flags go together (a usage error, exit 2, when
 * not) and, when any were given, makes them cfg's one provider for every
 * tier (daemon_config_set_provider). Returns 0 or the exit code. */
int cli_provider_apply(struct cli *c, const char *cmd,
                       const struct cli_provider *p, struct daemon_config *cfg);

/* Opens the ledger for a command; prints the error and returns the exit
 * code (non-zero) on failure, 0 on success. */
int cli_open(struct cli *c, unsigned flags, struct ledger **out);

/* Calls a method of the handler table with in (consumed) on an open ledger.
 * On success *out holds the result; on failure the error is printed and the
 * exit code returned. */
int cli_call(struct cli *c, struct ledger *l, const char *method, cJSON *in,
             cJSON **out);

/* Prints an error: "forum: msg" on stderr, and with --json also the error
 * object on stderr. Returns the exit code for err->code. */
int cli_fail(struct cli *c, const struct fo_err *err);

/* Prints v as JSON on stdout: canonical with --json, else indented. */
void cli_print_json(const cJSON *v, int pretty);

/* Parses a non-negative integer argument; -1 when it is not one. */
long long cli_parse_seq(const char *s);

/* A usage error: a hint line, then the error (with --json the error object
 * is the last line of stderr, for scripts). Returns 2. */
int cli_usage_error(struct cli *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints a command's help text on stdout; returns 0. */
int cli_help(const char *text);

/* True when argv[i] is -h or --help. */
int cli_is_help(const char *arg);

#endif
