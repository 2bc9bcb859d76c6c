/* cli: helpers shared by the command groups: opening the ledger, calling a
 * table method, printing results and errors. */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/httpc.h"
#include "daemon/orch.h"
#include "daemon/orch_model.h"
#include "daemon/service.h"
#include "ledger/fo_json.h"
#include "ledger/fo_version.h"
#include "surfaces/surf.h"

int cli_fail(struct cli *c, const struct fo_err *err)
{
    fprintf(stderr, "forum: %s\n",
            err->msg[0] ? err->msg : fo_code_message(err->code));
    if (c && c->json) {
        cJSON *e = surf_error_json(err);
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        if (e && fo_json_canon(e, &b, NULL) == FO_OK)
            fprintf(stderr, "%s\n", b.data);
        fo_buf_release(&b);
        cJSON_Delete(e);
    }
    int code = fo_code_exit(err->code);
    return code ? code : 3;
}

int cli_append_all(struct ledger *l, struct ledger_append *reqs, size_t n,
                   struct fo_err *err)
{
    if (!n)
        return FO_OK;
    int rc = ledger_append_batch(l, reqs, n, err);
    for (size_t i = 0; !rc && i < n; i++)
        if (reqs[i].rc) {
            *err = reqs[i].err;
            rc = reqs[i].rc;
        }
    return rc;
}

void cli_remove_sqlite(const char *dir)
{
    static const char *const names[] = {"ledger.db", "ledger.db-wal",
                                        "ledger.db-shm"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        unlink(p);
    }
}

int cli_open(struct cli *c, unsigned flags, struct ledger **out)
{
    struct fo_err err;
    fo_err_clear(&err);
    int rc = ledger_open(c->ledger_dir, flags, NULL, out, &err);
    if (rc) {
        /* A refused or damaged file is a storage error (exit 3), and so is
         * a missing ledger for commands that need one. */
        if (rc == FO_E_NOT_FOUND)
            err.code = FO_E_IO;
        return cli_fail(c, &err);
    }
    return 0;
}

int cli_host_start(const char *dir, struct daemon_config *dc, struct orch *orch,
                   struct surf_ctx *ctx, struct daemon_embed **out,
                   struct fo_err *err)
{
    dc->dir = dir;
    dc->orch = orch;
    int rc = daemon_embed_start(dc, 0, out, err);
    if (rc == FO_OK) {
        ctx->host_call = daemon_embed_call;
        ctx->host_hook = *out;
    }
    return rc;
}

int cli_call_hosted(const char *dir, struct daemon_config *dc,
                    struct orch *orch, struct surf_ctx *ctx, const char *method,
                    const cJSON *in, cJSON **out, struct fo_err *err)
{
    const struct surf_method *m = surf_find(method);
    struct daemon_embed *host = NULL;
    int rc = m ? cli_host_start(dir, dc, orch, ctx, &host, err)
               : fo_err_set(err, FO_E_INTERNAL, "no method %s", method);
    if (!rc)
        rc = surf_call(ctx, m, in, out, err);
    struct fo_err serr;
    if (host && daemon_embed_stop(host, &serr) != FO_OK && !rc) {
        *err = serr;
        rc = serr.code;
    }
    ctx->host_call = NULL;
    ctx->host_hook = NULL;
    return rc;
}

int cli_call_err(struct ledger *l, const char *method, cJSON *in, cJSON **out,
                 struct fo_err *err)
{
    const struct surf_method *m = surf_find(method);
    struct surf_ctx ctx = {.ledger = l};
    int rc;
    if (m && m->where == SURF_ON_RUN) {
        /* a run method (a gate's decision) has one entry: an engine's,
         * here one of this command's own */
        struct daemon_config dc;
        daemon_config_init(&dc);
        rc = cli_call_hosted(ledger_dir(l), &dc, NULL, &ctx, method, in, out,
                             err);
    } else {
        rc = m ? surf_call(&ctx, m, in, out, err)
               : fo_err_set(err, FO_E_INTERNAL, "no method %s", method);
    }
    cJSON_Delete(in);
    return rc;
}

int cli_call(struct cli *c, struct ledger *l, const char *method, cJSON *in,
             cJSON **out)
{
    struct fo_err err;
    fo_err_clear(&err);
    if (cli_call_err(l, method, in, out, &err))
        return cli_fail(c, &err);
    return 0;
}

void cli_tty_write(FILE *f, const char *s, size_t n)
{
    if (!isatty(fileno(f))) {
        fwrite(s, 1, n, f);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const unsigned char *u = (const unsigned char *)s + i;
        unsigned cp = 0;
        size_t w = 0; /* bytes of a character shown as \uXXXX */
        if ((u[0] < 0x20 && u[0] != '\n' && u[0] != '\t') || u[0] == 0x7f) {
            cp = u[0], w = 1; /* C0, DEL */
        } else if (u[0] == 0xc2 && i + 1 < n && u[1] >= 0x80 && u[1] <= 0x9f) {
            cp = u[1], w = 2; /* C1: CSI, OSC... */
        } else if (u[0] == 0xe2 && i + 2 < n &&
                   ((u[1] == 0x80 && u[2] >= 0xaa && u[2] <= 0xae) ||
                    (u[1] == 0x81 && u[2] >= 0xa6 && u[2] <= 0xa9))) {
            /* bidi overrides and isolates (U+202A..E, U+2066..9) */
            cp = 0x2000u | ((u[1] & 0x3fu) << 6) | (u[2] & 0x3fu), w = 3;
        }
        if (!w) {
            fputc(u[0], f);
            continue;
        }
        fprintf(f, "\\u%04x", cp);
        i += w - 1;
    }
}

void cli_tty_puts(FILE *f, const char *s)
{
    cli_tty_write(f, s, strlen(s));
}

void cli_print_json(const cJSON *v, int pretty)
{
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (fo_json_write(v, pretty ? FO_JSON_PRETTY : 0, &b, &err) == FO_OK) {
        /* C1 controls and bidi overrides as \u escapes on a terminal:
         * still JSON, never an escape sequence */
        cli_tty_write(stdout, b.data, b.len);
        fputc('\n', stdout);
    } else {
        fprintf(stderr, "forum: cannot print result: %s\n", err.msg);
    }
    fo_buf_release(&b);
}

long long cli_parse_seq(const char *s)
{
    if (!s || *s < '0' || *s > '9') /* strtoll would skip spaces and signs */
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return -1;
    return v;
}

int cli_is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

int cli_usage_error(struct cli *c, const char *fmt, ...)
{
    struct fo_err err;
    va_list ap;
    va_start(ap, fmt);
    fo_err_setv(&err, FO_E_USAGE, fmt, ap);
    va_end(ap);
    fprintf(stderr, "run the command with --help for usage\n");
    cli_fail(c, &err);
    return 2;
}

int cli_help(const char *text)
{
    fputs(text, stdout);
    return 0;
}

_Static_assert(CLI_TIER_GROUPS_MAX == ORCH_MODEL_PROVIDERS_MAX,
               "one provider per --tier group");

/* The group the next provider flag goes to: the last one opened. */
static struct cli_provider_group *group(struct cli_providers *p)
{
    if (p->n == 0)
        p->n = 1; /* g[0], the flags before any --tier */
    return &p->g[p->n - 1];
}

/* Sets *field to value, or notes that flag came twice in the group. */
static void set_once(struct cli_provider_group *g, const char **field,
                     const char *flag, const char *value)
{
    if (*field && !g->twice)
        g->twice = flag;
    *field = value;
}

/* Takes flag (with value, NULL for --api) into p when it is a provider
 * flag (--tier, --chat-url, --model, --api-key-env, --api). Returns 0 when
 * it is not one, 1 when only the flag was taken (--api), 2 when the value
 * was taken too, -1 when it needs a value and value is NULL. Mistakes
 * within the groups wait for cli_provider_apply. */
static int provider_arg(struct cli_providers *p, const char *flag,
                        const char *value)
{
    static const char *const with_value[] = {"--tier", "--chat-url", "--model",
                                             "--api-key-env"};
    if (!strcmp(flag, "--api")) {
        p->given++;
        if (p->overflow)
            return 1;
        struct cli_provider_group *g = group(p);
        if (g->api && !g->twice)
            g->twice = "--api";
        g->api = 1;
        return 1;
    }
    size_t k = 0;
    while (k < 4 && strcmp(flag, with_value[k]))
        k++;
    if (k == 4)
        return 0;
    if (!value)
        return -1;
    p->given++;
    if (p->overflow)
        return 2;
    if (k == 0) {
        group(p);
        if (p->n > CLI_TIER_GROUPS_MAX) { /* g[0] and 32 groups are full */
            p->overflow = 1;
            return 2;
        }
        p->g[p->n++] = (struct cli_provider_group){.tier = value};
        return 2;
    }
    struct cli_provider_group *g = group(p);
    set_once(g,
             k == 1   ? &g->chat_url
             : k == 2 ? &g->model
                      : &g->key_env,
             flag, value);
    return 2;
}

int cli_provider_call(struct cli *c, const char *cmd, const char *flag,
                      const char *v, void *providers)
{
    if (provider_arg(providers, flag, v) < 0) /* not from cli_parse */
        return cli_usage_error(c, "%s: %s needs a value", cmd, flag);
    return 0;
}

/* The tier named s, ORCH_TIER_ANY for "any", or -2. */
static int tier_of(const char *s)
{
    if (!strcmp(s, "any"))
        return ORCH_TIER_ANY;
    for (int t = ORCH_TIER_CHEAP; t <= ORCH_TIER_FRONTIER; t++)
        if (!strcmp(s, orch_tier_name(t)))
            return t;
    return -2;
}

int cli_provider_apply(struct cli *c, const char *cmd,
                       const struct cli_providers *p, struct daemon_config *cfg)
{
    struct orch_model_provider pv[CLI_TIER_GROUPS_MAX + 1];
    size_t n = 0;
    if (!p->given)
        return 0;
    if (p->overflow)
        return cli_usage_error(c, "%s: more than %d model providers", cmd,
                               ORCH_MODEL_PROVIDERS_MAX);
    for (int i = 0; i < p->n; i++) {
        const struct cli_provider_group *g = &p->g[i];
        /* "--tier cheap: " names the group in every message */
        char where[80] = "";
        if (g->tier)
            snprintf(where, sizeof(where), "--tier %.60s: ", g->tier);
        int tier = g->tier ? tier_of(g->tier) : ORCH_TIER_ANY;
        int empty = !g->chat_url && !g->model && !g->key_env && !g->api;
        if (tier == -2)
            return cli_usage_error(c,
                                   "%s: %snot a tier (cheap, capable, "
                                   "frontier or any)",
                                   cmd, where);
        if (empty && !g->tier)
            continue; /* no flags before the first --tier */
        if (empty)
            return cli_usage_error(c,
                                   "%s: %sno provider flags after it "
                                   "(--chat-url URL --model M, or --api)",
                                   cmd, where);
        if (g->twice)
            return cli_usage_error(c,
                                   "%s: %s%s given twice for one provider "
                                   "(start the next with --tier TIER)",
                                   cmd, where, g->twice);
        if (g->chat_url && g->api)
            return cli_usage_error(c,
                                   "%s: %s--chat-url and --api in one "
                                   "provider (give each its own --tier)",
                                   cmd, where);
        if (g->chat_url && !g->model)
            return cli_usage_error(c, "%s: %s--chat-url needs --model M", cmd,
                                   where);
        if (!g->chat_url && !g->api)
            return cli_usage_error(c, "%s: %s%s needs --chat-url URL or --api",
                                   cmd, where,
                                   g->model ? "--model" : "--api-key-env");
        const char *key_env = g->key_env ? g->key_env
                              : g->api   ? ORCH_ANTHROPIC_KEY_ENV_DEFAULT
                                         : NULL;
        /* The key is read at each call (orch_model_call); a variable that
         * is not set would fail the first call after the request was
         * witnessed, so it is refused here, before anything is written. */
        const char *key = key_env ? secure_getenv(key_env) : NULL;
        if (key_env && (!key || !*key))
            return cli_usage_error(c,
                                   "%s: %sthe API key variable %s is not set",
                                   cmd, where, key_env);
        if (n == ORCH_MODEL_PROVIDERS_MAX)
            return cli_usage_error(c, "%s: more than %d model providers", cmd,
                                   ORCH_MODEL_PROVIDERS_MAX);
        pv[n++] = (struct orch_model_provider){
            .api = g->api ? ORCH_EXEC_ANTHROPIC : ORCH_EXEC_CHAT,
            .url = g->chat_url,
            .model = g->model ? g->model : ORCH_ANTHROPIC_MODEL_DEFAULT,
            .api_key_env = key_env,
            .tier = tier,
        };
    }
    struct fo_err err;
    fo_err_clear(&err);
    if (daemon_config_set_providers(cfg, pv, n, &err) != FO_OK)
        return cli_fail(c, &err);
    return 0;
}

/* Edits (insert, delete, substitute, swap two neighbours) from a to b. */
static size_t distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 32 || m > 32)
        return 99;
    size_t d[33][33];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
                a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

const char *cli_closest(const char *typed, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t bd = 3; /* at most two edits, and fewer than half the word */
    for (size_t i = 0; i < n; i++) {
        size_t dd = distance(typed, names[i]);
        if (dd < bd && dd * 2 < strlen(names[i])) {
            bd = dd;
            best = names[i];
        }
    }
    return best;
}

int cli_bad_sub(struct cli *c, const char *cmd, const char *sub,
                const char *subs)
{
    char list[512], said[600] = "";
    snprintf(list, sizeof(list), "%s", subs);
    const char *names[32];
    size_t n = 0;
    for (char *save = NULL, *t = strtok_r(list, " ", &save);
         t && n < sizeof(names) / sizeof(names[0]);
         t = strtok_r(NULL, " ", &save))
        names[n++] = t;
    const char *near = cli_closest(sub, names, n);
    if (near)
        return cli_usage_error(c,
                               "%s: unknown command %s; did you mean `forum "
                               "%s %s`?",
                               cmd, sub, cmd, near);
    for (size_t k = 0; k < n; k++) {
        size_t used = strlen(said);
        snprintf(said + used, sizeof(said) - used, "%s%s",
                 k == 0       ? ""
                 : k + 1 == n ? " or "
                              : ", ",
                 names[k]);
    }
    return cli_usage_error(c, "%s: unknown command %s (%s)", cmd, sub, said);
}

int cli_is_option(const char *a)
{
    return a[0] == '-' && (a[1] == '-' || (a[1] >= 'a' && a[1] <= 'z') ||
                           (a[1] >= 'A' && a[1] <= 'Z'));
}

int cli_bad_arg(struct cli *c, const char *cmd, const char *arg,
                const char *flags)
{
    char list[1024];
    snprintf(list, sizeof(list), "%s", flags ? flags : "");
    const char *names[128];
    size_t n = 0;
    for (char *save = NULL, *t = strtok_r(list, " ", &save);
         t && n < sizeof(names) / sizeof(names[0]);
         t = strtok_r(NULL, " ", &save))
        names[n++] = t;
    return cli_bad_arg_names(c, cmd, arg, names, n);
}

int cli_bad_arg_names(struct cli *c, const char *cmd, const char *arg,
                      const char *const *flags, size_t nflags)
{
    if (!cli_is_option(arg))
        return cli_usage_error(c, "%s: unexpected argument %s", cmd, arg);
    /* the option as typed, without any =VALUE */
    char typed[64];
    size_t tn = strcspn(arg, "=");
    if (tn >= sizeof(typed))
        return cli_usage_error(c, "%s: unknown option %s", cmd, arg);
    memcpy(typed, arg, tn);
    typed[tn] = '\0';
    /* the candidates: cmd's options, then the global ones (main takes
     * those out of argv, so they only come here as near misses) */
    const char *names[128];
    size_t n = 0;
    for (size_t k = 0; k < nflags && n < sizeof(names) / sizeof(names[0]) - 3;
         k++)
        names[n++] = flags[k];
    size_t own = n;
    names[n++] = "--json";
    names[n++] = "--ledger";
    names[n++] = "--help";
    for (size_t k = 0; k < n; k++) {
        if (strcmp(typed, names[k]))
            continue;
        if (k >= own)
            return cli_usage_error(c, "%s: %s takes no value here", cmd, typed);
        if (arg[tn] == '=')
            return cli_usage_error(c, "%s: give the value after a space: %s %s",
                                   cmd, typed, arg + tn + 1);
        return cli_usage_error(c, "%s: %s needs a value", cmd, typed);
    }
    const char *near = cli_closest(typed, names, n);
    if (near)
        return cli_usage_error(c, "%s: unknown option %s; did you mean %s?",
                               cmd, arg, near);
    return cli_usage_error(c, "%s: unknown option %s", cmd, arg);
}

/* ---- the command table ------------------------------------------------ */

const char cli_usage_text[] =
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
    "  run start|get|cancel|wait|list|show ...\n"
    "                 background runs in the daemon (forum run --help)\n"
    "  session list|show|fork|remember|forget ...\n"
    "                 multi-turn sessions and their facts (forum session "
    "--help)\n"
    "  key add|list|revoke ...\n"
    "                 the model gateway's client keys (forum key --help)\n"
    "  gate list|approve|edit|reject ...\n"
    "                 approval gates: runs waiting for a human (forum gate "
    "--help)\n"
    "  dashboard [--open]\n"
    "                 the signed-in link to the daemon's web dashboard\n"
    "  verify [--deep] the same as `forum ledger verify`\n"
    "  verify --tiles DIR|URL --vkey KEY [--old NOTE] [--witness WKEY]\n"
    "                 check a log from its static tiles alone, no ledger\n"
    "  witness keygen|cosign ...\n"
    "                 act as a witness: cosign checkpoints (C2SP)\n"
    "  import otel|langsmith|jsonl FILE\n"
    "                 witness an external trace (forum import --help)\n"
    "  export otel RUN  a run as an OpenTelemetry trace (OTLP/JSON)\n"
    "  bench A B      two ledgers' summaries side by side, with deltas\n"
    "  status         the ledger and its runs at a glance\n"
    "  doctor         check providers, sandbox, store, key modes, disk\n"
    "  demo           a whole stub run in a fresh temporary data dir\n"
    "  humanize TEXT  plainer wording, checked against a delivery profile\n"
    "  runtime inspect  what would run, without running a model\n"
    "  context preflight REQUEST\n"
    "                 what a request would send to the models\n"
    "  import-trace FILE --format F\n"
    "                 the reference's name for `forum import F FILE`\n"
    "  grade [RUN]    the outcome grade of a run from its independent "
    "checks\n"
    "  export-gradable [RUN] [--out FILE]\n"
    "                 a run as a provable gradable-trajectory row\n"
    "  mine FILE      a trace imported, graded and exported as a row\n"
    "  lane list|route|gap\n"
    "                 proof lanes: route claims judged and witnessed\n"
    "  bench-deep-verify\n"
    "                 how verification scales (a JSON receipt)\n"
    "  version        print the version ([--json])\n"
    "\n"
    "global options:\n"
    "  --ledger DIR   the data dir (env FORUM_LEDGER; default "
    "./forum-ledger)\n"
    "  --json         print the result object as JSON\n"
    "  -h, --help     help (also after any command)\n"
    "\n"
    "exit codes: 0 ok; 1 verification failed or not found; 2 usage or bad\n"
    "input; 3 I/O or storage error (a daemon, a model or the disk, and\n"
    "output that could not be written, as to a full disk)\n"
    "\n"
    "examples:\n"
    "  forum ledger init\n"
    "  forum serve start\n"
    "  forum submit \"add a login endpoint to the api server\"\n"
    "  forum verify --deep\n";

int cli_version(struct cli *c, int argc, char **argv)
{
    const struct cli_opt opts[] = {CLI_OPT_END};
    int pe = cli_parse(c, "version", argc, argv, opts, NULL, 0, NULL);
    if (pe == CLI_PARSE_HELP)
        return cli_help("usage: forum version [--json]\nPrints the version.\n"
                        "example:\n  forum version --json\n");
    if (pe)
        return pe;
    if (c->json)
        printf("{\"version\":\"%s\"}\n", FO_VERSION);
    else
        printf("forum %s\n", FO_VERSION);
    return 0;
}

/* The commands: one row each; `alias` rows run `forum ledger <alias>`. */
const struct cli_command cli_commands[] = {
    {"ledger", cli_ledger, NULL,
     "init append get body show replay chain verify redact checkpoint prove "
     "consistency key bundle summary tiles cosign witness backup restore "
     "tail export import migrate capsule room"},
    {"serve", cli_serve, NULL, "start stop status logs"},
    {"mcp", cli_mcp, NULL, NULL},
    {"docs", cli_docs, NULL, "http mcp man completion"},
    {"verify-bundle", cli_verify_bundle, NULL, NULL},
    /* forum verify is ledger verify, but with --tiles (cli_tiles.c) */
    {"verify", cli_verify, NULL, NULL},
    {"witness", cli_witness, NULL, "keygen cosign"},
    {"roster", cli_roster, NULL, NULL},
    {"route", cli_route, NULL, NULL},
    {"run-plan", cli_run_plan, NULL, NULL},
    {"submit", cli_submit, NULL, NULL},
    {"run", cli_run, NULL, "start get cancel wait list show"},
    {"gate", cli_gate, NULL, "list approve edit reject"},
    {"session", cli_session, NULL, "list show fork remember forget"},
    {"key", cli_key, NULL, "add list revoke"},
    {"plan", cli_plan, NULL, NULL},
    {"bench", cli_bench, NULL, NULL},
    {"import", cli_import, NULL, "otel langsmith jsonl"},
    {"export", cli_export, NULL, "otel"},
    {"version", cli_version, NULL, NULL},
    {"dashboard", cli_dashboard, NULL, NULL},
    /* the reference's operator commands (cli_ref.c) */
    {"status", cli_status, NULL, NULL},
    {"doctor", cli_doctor, NULL, NULL},
    {"demo", cli_demo, NULL, NULL},
    {"humanize", cli_humanize, NULL, NULL},
    {"runtime", cli_runtime, NULL, "inspect"},
    {"context", cli_context, NULL, "preflight"},
    {"import-trace", cli_import_trace, NULL, NULL},
    /* grading, proof lanes, the verify benchmark (cli_grade.c,
     * cli_bench_deep.c) */
    {"grade", cli_grade, NULL, NULL},
    {"export-gradable", cli_export_gradable, NULL, NULL},
    {"mine", cli_mine, NULL, NULL},
    {"lane", cli_lane, NULL, "list route gap"},
    /* campaigns (cli_campaign.c) */
    {"campaign", cli_campaign, NULL,
     "declare list status next run ingest-status"},
    {"bench-deep-verify", cli_bench_deep_verify, NULL, NULL},
};

const size_t cli_n_commands = sizeof(cli_commands) / sizeof(cli_commands[0]);

const char *cli_str_or(const cJSON *o, const char *k, const char *dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

long long cli_int_or(const cJSON *o, const char *k, long long dflt)
{
    long long v = dflt;
    if (fo_json_get_int(o, k, INT64_MIN, INT64_MAX, &v) != FO_OK)
        v = dflt;
    return v;
}

/* ---- the daemon's HTTP calls ----------------------------------------------
 */

#define REPLY_MAX (64u << 20)

int cli_http_request(const char *host, int port, const char *method,
                     const char *path, const char *token, const char *body,
                     size_t body_len, int timeout_ms, int *status, char **out,
                     size_t *out_len, struct fo_err *err)
{
    static const char *const names[] = {"GET", "POST", "DELETE"};
    int m = -1;
    for (int i = 0; i < 3; i++)
        if (!strcmp(method, names[i]))
            m = i;
    if (m < 0)
        return fo_err_set(err, FO_E_INVALID, "method %s: not supported",
                          method);
    char url[HTTPC_URL_MAX + 1];
    int n = snprintf(url, sizeof(url),
                     strchr(host, ':') ? "http://[%s]:%d%s" : "http://%s:%d%s",
                     host, port, path);
    if (n < 0 || (size_t)n >= sizeof(url))
        return fo_err_set(err, FO_E_INVALID, "%s: path too long", path);
    struct httpc_url u;
    int rc = httpc_url_parse(url, &u, err);
    if (rc)
        return rc;
    struct httpc_header h[2];
    size_t nh = 0;
    struct fo_buf auth;
    fo_buf_init(&auth, 16 * 1024);
    if (token && fo_buf_printf(&auth, "Bearer %s", token) == FO_OK)
        h[nh++] = (struct httpc_header){"Authorization", auth.data};
    /* every write says application/json, with a body or none: the
     * daemon refuses any other (a browser form's) */
    if (body || m != HTTPC_GET)
        h[nh++] = (struct httpc_header){"Content-Type", "application/json"};
    struct httpc_spec spec = {.method = m,
                              .url = &u,
                              .headers = h,
                              .n_headers = nh,
                              .body =
                                  body ? body : (m != HTTPC_GET ? "" : NULL),
                              .body_len = body ? body_len : 0,
                              .timeout_ms = timeout_ms,
                              .body_max = REPLY_MAX};
    struct httpc_reply rep;
    rc = httpc_fetch(&spec, &rep, err);
    fo_buf_release(&auth);
    httpc_url_release(&u);
    if (rc)
        return rc;
    *status = rep.status;
    *out = rep.body;
    if (out_len)
        *out_len = rep.len;
    return FO_OK;
}
