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

/* Command groups: each returns the process exit code. */
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

/* Reads a whole file of at most max bytes into out (initialised here):
 * FO_E_INVALID when it cannot be opened or is longer (cli_proof.c). */
struct fo_buf;
int cli_read_file(const char *path, size_t max, struct fo_buf *out,
                  struct fo_err *err);
/* A --vkey (or --witness) argument: the key text, or @FILE holding it (one
 * trailing newline allowed), into out (initialised here). */
int cli_read_vkey(const char *arg, struct fo_buf *out, struct fo_err *err);

/* Static tiles and witnesses (cli_tiles.c): `forum ledger tiles`, `forum
 * ledger cosign`, `forum ledger witness add|list`, `forum witness
 * keygen|cosign`, and `forum verify --tiles` (without --tiles, `forum
 * verify` is `forum ledger verify`). */
int cli_ledger_tiles(struct cli *c, int argc, char **argv);
int cli_ledger_cosign(struct cli *c, int argc, char **argv);
int cli_ledger_witness(struct cli *c, int argc, char **argv);
int cli_witness(struct cli *c, int argc, char **argv);
int cli_verify(struct cli *c, int argc, char **argv);
/* The --witness/--min-witnesses check of `ledger verify --checkpoint`: 0
 * when at least min of the n witnesses cosigned the note in note_file, 1
 * (message printed) when not, 2 for bad input. */
int cli_witness_check(struct cli *c, const char *note_file,
                      const char *const *witness, int n, int min);

/* `forum key add|list|revoke` (cli_key.c): the gateway's client keys. */
int cli_key(struct cli *c, int argc, char **argv);

/* `forum serve [start|stop|status|logs]` (cli_serve.c). */
int cli_serve(struct cli *c, int argc, char **argv);

/* The running daemon's DIR/forum.state.json (cli_serve.c); NULL when absent,
 * unreadable or not JSON. */
cJSON *cli_read_state(struct cli *c);

/* One HTTP/1.1 request to host:port (httpc_fetch: Connection: close, a
 * private event base), for talking to our own daemon. method is GET, POST
 * or DELETE (else FO_E_INVALID). body may be NULL (no body). timeout_ms
 * covers connect and the whole reply. On FO_OK *status is the HTTP status
 * and *out the body (malloc'd, NUL-terminated; the caller frees). */
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

/* Background runs (cli_run.c): `forum run start REQUEST` and `run cancel
 * ID` go to the daemon of the data dir over HTTP (POST /runs, POST
 * /runs/{id}/cancel; with no daemon, cancel calls run_cancel here); `run
 * get ID` and `run wait ID [--timeout S]` call run_get on the ledger in
 * this process. Exit codes: the four classes through fo_code_exit (no daemon:
 * not_found, 1); wait also exits 1 when the run ended other than done and
 * 3 (code timeout) when --timeout passed first. */
int cli_run(struct cli *c, int argc, char **argv);

/* The daemon serving a data dir, as cli_run.c talks to it. */
struct cli_daemon {
    const char *dir; /* the data dir it serves */
    char host[256];
    int port;
    char token[128];
    int has_token;
};
/* The daemon serving c->ledger_dir: FO_E_NOT_FOUND when none runs (the
 * message says how to start one), FO_E_IO when its state or token cannot
 * be read. */
int cli_daemon_find(struct cli *c, struct cli_daemon *d, struct fo_err *err);
/* One method call to it (body NULL: none): *out the result object, or err
 * with the daemon's code and message. */
int cli_daemon_call(const struct cli_daemon *d, const char *method,
                    const char *path, const char *body, cJSON **out,
                    struct fo_err *err);
/* The same, waiting up to timeout_ms for the reply (a run's end). */
int cli_daemon_call_wait(const struct cli_daemon *d, const char *method,
                         const char *path, const char *body, int timeout_ms,
                         cJSON **out, struct fo_err *err);

/* The commands, one row each: the name, its function, or (alias) the
 * `forum ledger` subcommand it is; subs the subcommands, space-separated
 * (for completion and the man page). main() dispatches through it. */
struct cli_command {
    const char *name;
    int (*fn)(struct cli *c, int argc, char **argv);
    const char *alias;
    const char *subs;
};
extern const struct cli_command cli_commands[];
extern const size_t cli_n_commands;
/* The commands and subcommands ("run start") that do not parse through an
 * option table (cli_opt.h), one a line, into out: what the man page and
 * the completions cannot list the options of (cli_docs.c). */
struct fo_buf;
int cli_docs_untabled(struct cli *c, struct fo_buf *out);

/* The top-level help. */
extern const char cli_usage_text[];
int cli_version(struct cli *c, int argc, char **argv);

/* `forum ledger backup FILE` and `ledger restore FILE` (cli_backup.c). */
int cli_ledger_backup(struct cli *c, int argc, char **argv);

/* `forum ledger tail [-f]` (cli_tail.c), and the table of entries it and
 * `ledger show` print: a header, then one row an entry (local time, whole
 * actor up to 40 columns, kind, parent, a preview of the body read from
 * l). */
int cli_ledger_tail(struct cli *c, int argc, char **argv);

/* `forum dashboard [--open]` (cli_dashboard.c): the signed-in link to the
 * daemon's web page. */
int cli_dashboard(struct cli *c, int argc, char **argv);
int cli_actor_width(const struct ledger_entry *v, size_t n);
void cli_entries_header(int actor_w);
void cli_entries_row(struct ledger *l, const struct ledger_entry *e,
                     int actor_w);
int cli_ledger_restore(struct cli *c, int argc, char **argv);

/* `forum ledger migrate --into DIR [--postgres CONNINFO]` (cli_migrate.c):
 * the ledger copied into a new data dir, on either store. */
int cli_ledger_migrate(struct cli *c, int argc, char **argv);

/* `forum ledger export` and `ledger import` (cli_export.c). */
int cli_ledger_export(struct cli *c, int argc, char **argv);
int cli_ledger_import(struct cli *c, int argc, char **argv);

/* `forum import otel|langsmith|jsonl FILE` and `forum export otel RUN`
 * (cli_import.c; docs/IMPORT.md). */
int cli_import(struct cli *c, int argc, char **argv);
int cli_export(struct cli *c, int argc, char **argv);

/* Sessions (cli_session.c). */
int cli_session(struct cli *c, int argc, char **argv);
/* What CLI_SESSION_OPTS (cli_opt.h) collects: the session named, and the
 * context budget (made on first use; the caller deletes it). */
struct cli_session_opts {
    const char *session;
    cJSON *context;
};
/* The help lines of CLI_SESSION_OPTS, for a command's usage. */
#define CLI_SESSION_HELP                                                       \
    "  --session NAME       a turn of session NAME: it sees the earlier\n"     \
    "                       turns and facts (forum session --help)\n"          \
    "  --max-total-tokens N, --max-history-tokens N, --max-facts-tokens N,\n"  \
    "  --max-tool-results-tokens N\n"                                          \
    "                       the context budget (4 bytes a token; defaults\n"   \
    "                       from forum.json \"context\")\n"                    \
    "  --compaction drop|summary\n"                                            \
    "                       turns with no room left: dropped, or summarised\n" \
    "                       by the model (a compaction entry)\n"

/* The reference's operator commands (cli_ref.c; docs/COMPATIBILITY.md):
 * `forum status`, `doctor`, `demo`, `humanize`, `runtime inspect`, `context
 * preflight`, `import-trace`, and `ledger capsule` / `ledger room`. */
int cli_status(struct cli *c, int argc, char **argv);
int cli_doctor(struct cli *c, int argc, char **argv);
int cli_demo(struct cli *c, int argc, char **argv);
int cli_humanize(struct cli *c, int argc, char **argv);
int cli_runtime(struct cli *c, int argc, char **argv);
int cli_context(struct cli *c, int argc, char **argv);
int cli_import_trace(struct cli *c, int argc, char **argv);
int cli_ledger_capsule(struct cli *c, int argc, char **argv);
int cli_ledger_room(struct cli *c, int argc, char **argv);

/* Campaigns (cli_campaign.c): `forum campaign declare|list|status|next|run|
 * ingest-status`. */
int cli_campaign(struct cli *c, int argc, char **argv);

/* Grading and proof lanes (cli_grade.c): `forum grade`, `forum
 * export-gradable`, `forum mine`, `forum lane list|route|gap`; and `forum
 * bench-deep-verify` (cli_bench_deep.c). */
int cli_grade(struct cli *c, int argc, char **argv);
int cli_export_gradable(struct cli *c, int argc, char **argv);
int cli_mine(struct cli *c, int argc, char **argv);
int cli_lane(struct cli *c, int argc, char **argv);
int cli_bench_deep_verify(struct cli *c, int argc, char **argv);

/* Approval gates (cli_gate.c): `forum gate list|approve|edit|reject`. */
int cli_gate(struct cli *c, int argc, char **argv);

/* The help of the gate rows (CLI_GATE_OPTS, cli_opt.h). */
#define CLI_GATE_HELP                                                          \
    "  --gate SPEC          stop before each wave the policy gates until a\n"  \
    "                       human decides (forum gate --help): all,\n"         \
    "                       lane:NAME, category:NAME or wave:N (repeat)\n"     \
    "  --gate-timeout S     a gate's deadline (default 86400)\n"               \
    "  --gate-on-expiry X   reject (default) or approve at the deadline\n"

/* The model-provider flags of serve, mcp, submit and plan. A provider is
 * --chat-url URL --model M [--api-key-env VAR], or --api [--model M]
 * [--api-key-env VAR]. The flags before any --tier make the provider of
 * tier "any"; each --tier TIER (cheap, capable, frontier, any) opens a
 * group whose flags make one provider of that tier. A tier may be given
 * more than once: the order on the line is the fallback order within it.
 * Collect them with the rows of CLI_PROVIDER_OPTS (cli_opt.h), check and
 * apply them with cli_provider_apply. */
#define CLI_TIER_GROUPS_MAX 32 /* --tier groups (ORCH_MODEL_PROVIDERS_MAX) */

struct cli_provider_group {
    const char *tier; /* as given; NULL: the flags before any --tier */
    const char *chat_url, *model, *key_env;
    int api;
    const char *twice; /* the first flag given twice in the group */
};

struct cli_providers {
    /* g[0]: the flags before any --tier (maybe none); g[1..n-1]: --tier */
    struct cli_provider_group g[CLI_TIER_GROUPS_MAX + 1];
    int n;        /* groups in g; 0 counts as 1 */
    int given;    /* provider flags taken */
    int overflow; /* more --tier groups than fit */
};

/* The help text of the provider flags, the same in serve, mcp, submit and
 * plan. */
#define CLI_PROVIDER_HELP                                                      \
    "model providers (the roles, and the lanes on chat or anthropic):\n"       \
    "  --chat-url URL --model M [--api-key-env VAR]\n"                         \
    "                   an OpenAI-compatible server (Ollama, llama.cpp,\n"     \
    "                   vLLM, OpenRouter, OpenAI); the key is read from\n"     \
    "                   $VAR at each call, never printed or written down\n"    \
    "  --api [--model M] [--api-key-env VAR]\n"                                \
    "                   the Anthropic Messages API (default model\n"           \
    "                   " ORCH_ANTHROPIC_MODEL_DEFAULT                         \
    ", key $" ORCH_ANTHROPIC_KEY_ENV_DEFAULT ")\n"                             \
    "  --tier TIER      the provider flags after it, up to the next --tier,\n" \
    "                   make one provider of TIER (cheap, capable, frontier\n" \
    "                   or any); those before any --tier serve every tier.\n"  \
    "                   Lanes ask for their model_tier, the coordinator and\n" \
    "                   synthesizer for capable, the classifier and\n"         \
    "                   validator for cheap; a failed verdict escalates\n"     \
    "                   cheap -> capable -> frontier. A tier given twice\n"    \
    "                   falls back in the order given, then to \"any\".\n"     \
    "  e.g. --tier cheap --chat-url http://127.0.0.1:11434 --model qwen3:8b\n" \
    "       --tier capable --api --model " ORCH_ANTHROPIC_MODEL_DEFAULT "\n"   \
    "  Provider flags replace DIR/forum.json \"models\" as a whole; without\n" \
    "  them its providers serve, with neither every role is a stub. A key\n"   \
    "  variable that is not set is a usage error (exit 2).\n"

struct daemon_config;

/* Checks the provider flags and, when any were given, makes them cfg's
 * providers in the order given (daemon_config_set_providers), replacing
 * forum.json's "models" as a whole. Usage errors (exit 2, nothing done):
 * an unknown tier, a --tier with no provider flags after it, --model or
 * --api-key-env without --chat-url or --api, --chat-url without --model,
 * --chat-url and --api in one group, a flag given twice in one group,
 * more than CLI_TIER_GROUPS_MAX groups, and an API key variable (the one
 * named, or $ANTHROPIC_API_KEY for --api) that is not set: the key is
 * never read here beyond that check, nor printed. Returns 0 or the exit
 * code. */
int cli_provider_apply(struct cli *c, const char *cmd,
                       const struct cli_providers *p,
                       struct daemon_config *cfg);

/* Opens the ledger for a command; prints the error and returns the exit
 * code (non-zero) on failure, 0 on success. */
int cli_open(struct cli *c, unsigned flags, struct ledger **out);

/* ledger_append_batch of reqs[0..n), whose result is the first error of
 * the batch or of one of its requests (err set), or FO_OK when every
 * request was appended: what ingest, import and migrate want. */
int cli_append_all(struct ledger *l, struct ledger_append *reqs, size_t n,
                   struct fo_err *err);

/* Removes the SQLite files of dir's ledger (ledger.db and its -wal and
 * -shm): what a failed import or migration made. */
void cli_remove_sqlite(const char *dir);

/* An engine in this process for a command's run methods (daemon_embed_start
 * on dir without listening, orch the command's or NULL: one made from dc),
 * ctx's host_call pointed at it. dc must outlive the host; stop it with
 * daemon_embed_stop. */
struct daemon_config;
struct daemon_embed;
struct orch;
struct surf_ctx;
int cli_host_start(const char *dir, struct daemon_config *dc, struct orch *orch,
                   struct surf_ctx *ctx, struct daemon_embed **out,
                   struct fo_err *err);
/* method with in on ctx, on an engine hosted for the call
 * (cli_host_start, then daemon_embed_stop): what `forum submit` does. */
int cli_call_hosted(const char *dir, struct daemon_config *dc,
                    struct orch *orch, struct surf_ctx *ctx, const char *method,
                    const cJSON *in, cJSON **out, struct fo_err *err);

/* Calls a method of the handler table with in (consumed; may be NULL) on
 * an open ledger, with no orchestrator (a run method on an engine
 * of its own, made for the call). On success *out
 * holds the result; else the code, err set, nothing printed. */
int cli_call_err(struct ledger *l, const char *method, cJSON *in, cJSON **out,
                 struct fo_err *err);

/* cli_call_err, but on failure the error is printed and the exit code
 * returned. */
int cli_call(struct cli *c, struct ledger *l, const char *method, cJSON *in,
             cJSON **out);

/* Prints an error: "forum: msg" on stderr, and with --json also the error
 * object on stderr. Returns the exit code for err->code. */
int cli_fail(struct cli *c, const struct fo_err *err);

/* Prints v as JSON on stdout: canonical with --json, else indented; on a
 * terminal through cli_tty_write. */
void cli_print_json(const cJSON *v, int pretty);

/* Writes s (n bytes) to f; when f is a terminal, ledger content cannot
 * drive it: control characters (C0 but newline and tab, DEL, C1) and bidi
 * overrides are written as \uXXXX instead. */
void cli_tty_write(FILE *f, const char *s, size_t n);
void cli_tty_puts(FILE *f, const char *s);

/* Parses a non-negative integer argument; -1 when it is not one. */
long long cli_parse_seq(const char *s);

/* A usage error: a hint line, then the error (with --json the error object
 * is the last line of stderr, for scripts). Returns 2. */
int cli_usage_error(struct cli *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints a command's help text on stdout; returns 0. */
int cli_help(const char *text);

/* A string member of o, or dflt; an integer member, or dflt. */
const char *cli_str_or(const cJSON *o, const char *k, const char *dflt);
long long cli_int_or(const cJSON *o, const char *k, long long dflt);
/* Prints run_show's object for people: its steps, tasks, gates and answer;
 * full: every text whole (cli/cli_run_show.c). */
void cli_run_show_print(const cJSON *out, long long id, int full);

/* Of names, the one nearest to typed (at most two edits, and fewer than
 * half its letters), for a did-you-mean; NULL when none is near. */
const char *cli_closest(const char *typed, const char *const *names, size_t n);

/* An argument cmd does not take; flags lists cmd's options, space-separated
 * ("--limit --from -n"), and the global --json, --ledger and --help count
 * too. For an option (cli_is_option): "CMD: unknown option A; did you mean
 * --X?" when one of them is near (cli_closest), "CMD: --X needs a value"
 * when A is one of cmd's options (the parsers take an option that has a
 * value only with it), "CMD: give the value after a space: --X V" for
 * --X=V. Anything else is "CMD: unexpected argument A". Printed as
 * cli_usage_error; returns 2. */
int cli_bad_arg(struct cli *c, const char *cmd, const char *arg,
                const char *flags);
/* cli_bad_arg with cmd's options as an array (cli_parse passes its
 * table's names). */
int cli_bad_arg_names(struct cli *c, const char *cmd, const char *arg,
                      const char *const *flags, size_t nflags);
/* A subcommand cmd does not have; subs lists those it has, space-separated
 * ("list approve edit reject"): "CMD: unknown command S; did you mean
 * `forum CMD X`?" when one is near (cli_closest), else "CMD: unknown
 * command S (a, b or c)". Printed as cli_usage_error; returns 2. */
int cli_bad_sub(struct cli *c, const char *cmd, const char *sub,
                const char *subs);
/* True when a looks like an option: '-' then a letter or '-' (not "-" nor
 * "-5"). */
int cli_is_option(const char *a);

/* True when argv[i] is -h or --help. */
int cli_is_help(const char *arg);

#endif
