/* cli_orch: the orchestrator's commands: `forum roster`, `forum route`,
 * `forum run-plan` and `forum bench A B`. route and run-plan go through the
 * handler table, so --json prints exactly what HTTP and MCP serve. */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch.h"
#include "daemon/service.h"
#include "ledger/fo_json.h"
#include "surfaces/surf.h"

#define PLAN_FILE_MAX (4u << 20)
#define ROUTE_SHOW 5 /* candidates shown in the text form */
#define CLI_ENV_MAX 64
#define CLI_CATEGORIES_MAX 64

/* Builds the orchestrator for a command; prints the error on failure and
 * returns the exit code. */
static int make_orch(struct cli *c, const struct orch_config *cfg,
                     struct orch **out)
{
    struct fo_err err;
    fo_err_clear(&err);
    int rc = orch_create(cfg, out, &err);
    if (rc) {
        if (rc == FO_E_NOT_FOUND) /* a roster file that is not there */
            err.code = FO_E_INVALID;
        return cli_fail(c, &err);
    }
    return 0;
}

/* ---- forum roster ------------------------------------------------------ */

static const char roster_usage[] =
    "usage: forum roster [--roster FILE] [--json]\n"
    "Prints the roster of lanes the router and planner use: the default one\n"
    "built into forum, or FILE (JSON, {\"lanes\": [...]}) validated, with\n"
    "each lane's tools (docs/AGENTS.md).\n"
    "example: forum roster --roster my-lanes.json\n";

int cli_roster(struct cli *c, int argc, char **argv)
{
    struct orch_config cfg = {0};
    const struct cli_opt opts[] = {
        {"--roster", "FILE", CLI_OPT_STR, &cfg.roster_path, 0, 0, NULL, NULL,
         "the roster FILE (JSON), not the default one"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "roster", argc, argv, opts, NULL, 0, NULL);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(roster_usage) : pe;
    struct orch *o = NULL;
    int code = make_orch(c, &cfg, &o);
    if (code)
        return code;
    const struct orch_roster *r = orch_roster(o);
    if (c->json) {
        cJSON *j = orch_roster_json(r);
        if (j)
            cli_print_json(j, 0);
        else
            code = 3;
        cJSON_Delete(j);
    } else {
        for (size_t i = 0; i < r->n; i++) {
            const struct orch_lane *l = &r->lanes[i];
            printf("%-20s %-12s %-8s %-9s %s\n", l->name, l->category,
                   orch_tier_name(l->tier), orch_exec_name(l->executor),
                   l->domain);
            printf("%-20s keywords:", "");
            for (size_t k = 0; k < l->n_keywords; k++)
                printf(" %s", l->keywords[k]);
            printf("\n");
            if (l->n_tools) {
                printf("%-20s tools:", "");
                for (size_t k = 0; k < l->n_tools; k++)
                    printf(" %s%s", l->tools[k], k + 1 < l->n_tools ? "," : "");
                if (l->n_required) {
                    printf(" (required:");
                    for (size_t k = 0; k < l->n_required; k++)
                        printf(" %s", l->required_tools[k]);
                    printf(")");
                }
                printf("; guardrails %s%s\n",
                       l->guard_block ? "block" : "redact",
                       l->network ? "; network" : "");
            }
        }
        printf("%zu lanes\n", r->n);
    }
    orch_free(o);
    return code;
}

/* ---- forum route ------------------------------------------------------- */

static const char route_usage[] =
    "usage: forum route TEXT... [--roster FILE] [--json]\n"
    "Routes a request to a lane with the lexical router (no model): prints\n"
    "the decided lane and its confidence, or that it escalates (then the\n"
    "confidence is the margin between the two best scores). Words are\n"
    "joined with spaces.\n"
    "example:\n  forum route \"fix the flaky login test\"\n";

int cli_route(struct cli *c, int argc, char **argv)
{
    struct orch_config cfg = {0};
    const struct cli_opt opts[] = {
        {"--roster", "FILE", CLI_OPT_STR, &cfg.roster_path, 0, 0, NULL, NULL,
         "the roster (default: the built-in one)"},
        CLI_OPT_END,
    };
    const char **words = calloc((size_t)argc + 1, sizeof(*words));
    if (!words)
        return cli_fail(c, &(struct fo_err){FO_E_NOMEM, "out of memory"});
    int nw = 0;
    int code = cli_parse(c, "route", argc, argv, opts, words, argc, &nw);
    struct fo_buf text;
    fo_buf_init(&text, ORCH_ROUTE_TEXT_MAX);
    for (int i = 0; !code && i < nw; i++)
        if ((i && fo_buf_putc(&text, ' ')) || fo_buf_puts(&text, words[i]))
            code = cli_usage_error(c, "route: text over %u bytes",
                                   ORCH_ROUTE_TEXT_MAX);
    free(words);
    if (!code && !nw)
        code = cli_usage_error(c, "route: no TEXT");
    if (code) {
        fo_buf_release(&text);
        return code == CLI_PARSE_HELP ? cli_help(route_usage) : code;
    }
    struct orch *o = NULL;
    code = make_orch(c, &cfg, &o);
    cJSON *in = NULL, *out = NULL;
    if (!code) {
        in = cJSON_CreateObject();
        if (!in ||
            !cJSON_AddStringToObject(in, "text", text.data ? text.data : "")) {
            fprintf(stderr, "forum: out of memory\n");
            code = 3;
        }
    }
    if (!code) {
        struct fo_err err;
        fo_err_clear(&err);
        struct surf_ctx ctx = {.orch = o};
        const struct surf_method *m = surf_find("route");
        int rc = m ? surf_call(&ctx, m, in, &out, &err)
                   : fo_err_set(&err, FO_E_INTERNAL, "no method route");
        if (rc)
            code = cli_fail(c, &err);
    }
    if (!code && c->json) {
        cli_print_json(out, 0);
    } else if (!code) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(out, "decided");
        const cJSON *conf = cJSON_GetObjectItemCaseSensitive(out, "confidence");
        char num[FO_JSON_NUM_MAX];
        fo_json_number(conf->valuedouble, num);
        if (cJSON_IsString(d))
            printf("%s (confidence %s)\n", d->valuestring, num);
        else
            printf("escalate: no lane is clear (margin %s)\n", num);
        const cJSON *cand;
        int shown = 0;
        cJSON_ArrayForEach (
            cand, cJSON_GetObjectItemCaseSensitive(out, "candidates")) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(cand, "score");
            if (shown++ == ROUTE_SHOW || s->valuedouble == 0)
                break;
            fo_json_number(s->valuedouble, num);
            printf("  %-20s %s\n",
                   cJSON_GetObjectItemCaseSensitive(cand, "agent")->valuestring,
                   num);
        }
    }
    cJSON_Delete(in);
    cJSON_Delete(out);
    orch_free(o);
    fo_buf_release(&text);
    return code;
}

/* ---- forum run-plan ---------------------------------------------------- */

static const char run_plan_usage[] =
    "usage: forum run-plan FILE [options]\n"
    "Runs a plan ({\"tasks\": [...]}, JSON; FILE - reads stdin) wave by wave\n"
    "and witnesses every step in the ledger: request, plan, task, result.\n"
    "  --cmd CMD          run each task as CMD PROMPT (split like a shell\n"
    "                     would, never run by one); default: the stub\n"
    "  --model ID         the model id results record (default cmd:CMD)\n"
    "  --timeout SECONDS  per task (default 300); the process group is\n"
    "                     killed at the timeout\n"
    "  --max-parallel N   tasks of a wave at once (default 4)\n"
    "  --allow CATEGORY   only lanes of these categories run (repeat or\n"
    "                     comma-separate); others are refused, witnessed\n"
    "  --env NAME[=VALUE] add to the child's environment (default: PATH,\n"
    "                     HOME, LANG=C.UTF-8 only)\n"
    "  --roster FILE      the roster (default: the built-in one)\n"
    "  --request TEXT     the request the run answers (witnessed)\n"
    "exit codes: 0 every task ok, 1 a task failed or was refused, 2 bad\n"
    "plan or usage, 3 I/O or storage error\n"
    "example:\n  forum run-plan plan.json --cmd \"claude -p\" --max-parallel "
    "2\n";

static int read_text(const char *path, struct fo_buf *out, struct fo_err *err)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f)
        return fo_err_set(err, FO_E_INVALID, "cannot open: %s",
                          strerror(errno));
    char chunk[65536];
    size_t n;
    int rc = FO_OK;
    while (!rc && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        rc = fo_buf_append(out, chunk, n);
    if (rc == FO_E_TOO_LARGE)
        rc = fo_err_set(err, FO_E_INVALID, "over %u bytes", PLAN_FILE_MAX);
    else if (rc)
        rc = fo_err_set(err, rc, NULL);
    else if (ferror(f))
        rc = fo_err_set(err, FO_E_IO, "read error");
    if (f != stdin)
        fclose(f);
    return rc;
}

struct run_opts {
    const char *file, *request;
    struct orch_config cfg;
    const char *allow[CLI_CATEGORIES_MAX];
    char *allow_buf[CLI_CATEGORIES_MAX];
    const char *env[CLI_ENV_MAX + 4];
    char *env_buf[CLI_ENV_MAX + 4];
    size_t n_env, n_env_buf, n_allow_buf;
};

static void run_opts_release(struct run_opts *o)
{
    for (size_t i = 0; i < o->n_env_buf; i++)
        free(o->env_buf[i]);
    for (size_t i = 0; i < o->n_allow_buf; i++)
        free(o->allow_buf[i]);
}

static int add_env(struct run_opts *o, const char *name, const char *value)
{
    if (o->n_env >= CLI_ENV_MAX + 3)
        return -1;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (fo_buf_printf(&b, "%s=%s", name, value)) {
        fo_buf_release(&b);
        return -1;
    }
    char *s = fo_buf_detach(&b, NULL);
    if (!s)
        return -1;
    o->env_buf[o->n_env_buf++] = s;
    o->env[o->n_env++] = s;
    return 0;
}

/* --allow CATEGORY[,CATEGORY...] (repeatable) into o's categories. */
static int allow_call(struct cli *c, const char *cmd, const char *flag,
                      const char *v, void *ctx)
{
    (void)flag;
    struct run_opts *o = ctx;
    if (o->n_allow_buf == CLI_CATEGORIES_MAX)
        return cli_usage_error(c, "%s: too many --allow", cmd);
    char *list = malloc(strlen(v) + 1);
    if (!list)
        return cli_usage_error(c, "%s: out of memory", cmd);
    memcpy(list, v, strlen(v) + 1);
    o->allow_buf[o->n_allow_buf++] = list;
    for (char *s = list; s;) {
        char *comma = strchr(s, ',');
        if (comma)
            *comma = '\0';
        if (*s) {
            if (o->cfg.n_allowed_categories == CLI_CATEGORIES_MAX)
                return cli_usage_error(c, "%s: too many --allow", cmd);
            o->allow[o->cfg.n_allowed_categories++] = s;
        }
        s = comma ? comma + 1 : NULL;
    }
    if (o->cfg.n_allowed_categories == 0)
        return cli_usage_error(c, "%s: --allow: no category", cmd);
    return 0;
}

/* --env NAME=VALUE, or NAME (its value here, when set), into the child's
 * environment after the defaults. */
static int env_call(struct cli *c, const char *cmd, const char *flag,
                    const char *e, void *ctx)
{
    (void)flag;
    struct run_opts *o = ctx;
    const char *eq = strchr(e, '=');
    const char *v = eq ? NULL : getenv(e);
    if (!*e || e[0] == '=')
        return cli_usage_error(c, "%s: --env %s: NAME[=VALUE]", cmd, e);
    if (eq) {
        if (o->n_env >= CLI_ENV_MAX + 3)
            return cli_usage_error(c, "%s: too many --env", cmd);
        o->env[o->n_env++] = e;
    } else if (v && add_env(o, e, v)) {
        return cli_usage_error(c, "%s: too many --env", cmd);
    }
    return 0;
}

static int parse_run_opts(struct cli *c, int argc, char **argv,
                          struct run_opts *o)
{
    long long timeout = 0, parallel = 0;
    struct cli_opt_call allow = {allow_call, o}, env = {env_call, o};
    const struct cli_opt opts[] = {
        {"--cmd", "CMD", CLI_OPT_STR, &o->cfg.cmd, 0, 0, NULL, NULL,
         "run each task as CMD PROMPT (default: the stub)"},
        {"--model", "ID", CLI_OPT_STR, &o->cfg.model, 0, 0, NULL, NULL,
         "the model id results record (default cmd:CMD)"},
        {"--timeout", "SECONDS", CLI_OPT_INT, &timeout, 1, 86400, NULL, NULL,
         "per task (default 300)"},
        {"--max-parallel", "N", CLI_OPT_INT, &parallel, 1,
         ORCH_MAX_PARALLEL_MAX, NULL, NULL,
         "tasks of a wave at once (default 4)"},
        {"--allow", "CATEGORY", CLI_OPT_CALL, &allow, 0, 0, NULL, NULL,
         "only lanes of these categories run (repeat or comma-separate)"},
        {"--env", "NAME[=VALUE]", CLI_OPT_CALL, &env, 0, 0, NULL, NULL,
         "add to the child's environment"},
        {"--roster", "FILE", CLI_OPT_STR, &o->cfg.roster_path, 0, 0, NULL, NULL,
         "the roster (default: the built-in one)"},
        {"--request", "TEXT", CLI_OPT_STR, &o->request, 0, 0, NULL, NULL,
         "the request the run answers (witnessed)"},
        CLI_OPT_END,
    };
    /* the defaults first: --env adds to them, in the order given */
    const char *path = getenv("PATH"), *home = getenv("HOME");
    if (add_env(o, "PATH", path && *path ? path : "/usr/bin:/bin") ||
        (home && *home && add_env(o, "HOME", home)) ||
        add_env(o, "LANG", "C.UTF-8"))
        return cli_usage_error(c, "run-plan: out of memory");
    const char *pos[2];
    int npos = 0;
    int ex = cli_parse(c, "run-plan", argc, argv, opts, pos, 2, &npos);
    if (ex == CLI_PARSE_HELP)
        return cli_help(run_plan_usage) - 1; /* -1: stop, exit 0 */
    if (ex)
        return ex;
    if (npos > 1)
        return cli_usage_error(c, "run-plan: more than one FILE");
    if (!npos)
        return cli_usage_error(c, "run-plan: no plan FILE");
    o->file = pos[0];
    if (timeout)
        o->cfg.timeout_ms = (int)(timeout * 1000);
    if (parallel)
        o->cfg.max_parallel = (int)parallel;
    o->env[o->n_env] = NULL;
    o->cfg.env = o->env;
    o->cfg.allowed_categories = o->allow;
    return 0;
}

static void print_run(const cJSON *out)
{
    const cJSON *r;
    int ok = 0, failed = 0;
    cJSON_ArrayForEach (r, cJSON_GetObjectItemCaseSensitive(out, "results")) {
        const char *id = cJSON_GetObjectItemCaseSensitive(r, "id")->valuestring;
        const char *agent =
            cJSON_GetObjectItemCaseSensitive(r, "agent")->valuestring;
        int tok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok"));
        int refused =
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "refused"));
        const char *output =
            cJSON_GetObjectItemCaseSensitive(r, "output")->valuestring;
        long long seq =
            (long long)cJSON_GetObjectItemCaseSensitive(r, "seq")->valuedouble;
        int line = (int)strcspn(output, "\n");
        if (line > 100)
            line = 100;
        printf("%-12s %-20s %-7s seq %-6lld %.*s\n", id, agent,
               refused ? "refused"
               : tok   ? "ok"
                       : "failed",
               seq, line, output);
        ok += tok;
        failed += !tok;
    }
    printf("%d ok, %d failed or refused; request seq %lld, plan seq %lld\n", ok,
           failed,
           (long long)cJSON_GetObjectItemCaseSensitive(out, "request_seq")
               ->valuedouble,
           (long long)cJSON_GetObjectItemCaseSensitive(out, "plan_seq")
               ->valuedouble);
}

int cli_run_plan(struct cli *c, int argc, char **argv)
{
    struct run_opts opts = {0};
    struct fo_buf text;
    struct fo_err err;
    struct orch *o = NULL;
    struct ledger *l = NULL;
    cJSON *plan = NULL, *in = NULL, *out = NULL;
    fo_err_clear(&err);
    fo_buf_init(&text, PLAN_FILE_MAX);
    int code = parse_run_opts(c, argc, argv, &opts);
    if (code) {
        code = code < 0 ? 0 : code;
        goto out;
    }
    int rc = read_text(opts.file, &text, &err);
    if (!rc)
        rc = fo_json_parse(text.data ? text.data : "", text.len, &plan, &err);
    if (rc) {
        fo_err_prefix(&err, "plan %s", opts.file);
        code = cli_fail(c, &err);
        goto out;
    }
    opts.cfg.data_dir = c->ledger_dir;
    code = make_orch(c, &opts.cfg, &o);
    if (code)
        goto out;
    code = cli_open(c, LEDGER_OPEN_CREATE, &l);
    if (code)
        goto out;
    in = cJSON_CreateObject();
    if (!in || (opts.request &&
                !cJSON_AddStringToObject(in, "request", opts.request))) {
        code = cli_fail(c, &(struct fo_err){FO_E_NOMEM, "out of memory"});
        goto out;
    }
    cJSON_AddItemToObject(in, "plan", plan);
    plan = NULL;
    struct surf_ctx ctx = {.ledger = l, .orch = o};
    struct daemon_config dc;
    daemon_config_init(&dc);
    rc = cli_call_hosted(c->ledger_dir, &dc, o, &ctx, "plan_run", in, &out,
                         &err);
    if (rc) {
        code = cli_fail(c, &err);
        goto out;
    }
    if (c->json)
        cli_print_json(out, 0);
    else
        print_run(out);
    code = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "ok")) ? 0 : 1;
out:
    cJSON_Delete(plan);
    cJSON_Delete(in);
    cJSON_Delete(out);
    ledger_close(l);
    orch_free(o);
    fo_buf_release(&text);
    run_opts_release(&opts);
    return code;
}

/* ---- forum bench A B --------------------------------------------------- */

static const char bench_usage[] =
    "usage: forum bench A B [--json]\n"
    "Prints the summaries of two ledger dirs side by side with the delta\n"
    "(B - A) of every count: entries, bodies, kinds, actors, runs, model\n"
    "calls. --json: {\"a\", \"b\", \"delta\"}.\n"
    "example:\n  forum bench ./ledger-before ./ledger-after\n";

/* Flattens the numeric members of a summary into dotted keys. */
static int flatten(const cJSON *v, const char *prefix, cJSON *flat)
{
    const cJSON *m;
    cJSON_ArrayForEach (m, v) {
        char key[512];
        int n = snprintf(key, sizeof(key), "%s%s%s", prefix, *prefix ? "." : "",
                         m->string);
        if (n < 0 || (size_t)n >= sizeof(key))
            continue;
        if (cJSON_IsObject(m)) {
            if (flatten(m, key, flat))
                return -1;
        } else if (cJSON_IsNumber(m) &&
                   !cJSON_GetObjectItemCaseSensitive(flat, key)) {
            if (!cJSON_AddNumberToObject(flat, key, m->valuedouble))
                return -1;
        }
    }
    return 0;
}

static int summary_of(struct cli *c, const char *dir, cJSON **out)
{
    struct cli one = *c;
    one.ledger_dir = dir;
    struct ledger *l = NULL;
    int code = cli_open(&one, LEDGER_OPEN_READONLY, &l);
    if (code)
        return code;
    struct fo_err err;
    fo_err_clear(&err);
    int rc = orch_summary(l, out, &err);
    ledger_close(l);
    if (rc) {
        fo_err_prefix(&err, "%s", dir);
        return cli_fail(c, &err);
    }
    return 0;
}

static double num_or_zero(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

int cli_bench(struct cli *c, int argc, char **argv)
{
    const char *dirs[2] = {NULL, NULL};
    const struct cli_opt opts[] = {CLI_OPT_END};
    int nd = 0;
    int pe = cli_parse(c, "bench", argc, argv, opts, dirs, 2, &nd);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(bench_usage) : pe;
    if (nd != 2)
        return cli_usage_error(c, "bench: needs two ledger dirs A B");
    cJSON *sum[2] = {NULL, NULL}, *flat[2] = {NULL, NULL};
    cJSON *res = NULL, *delta = NULL;
    int code = summary_of(c, dirs[0], &sum[0]);
    if (!code)
        code = summary_of(c, dirs[1], &sum[1]);
    if (code)
        goto out;
    flat[0] = cJSON_CreateObject();
    flat[1] = cJSON_CreateObject();
    delta = cJSON_CreateObject();
    int ok = flat[0] && flat[1] && delta && !flatten(sum[0], "", flat[0]) &&
             !flatten(sum[1], "", flat[1]);
    /* every key of either side, in A's order then B's new ones */
    for (int s = 0; ok && s < 2; s++) {
        const cJSON *m;
        cJSON_ArrayForEach (m, flat[s]) {
            if (cJSON_GetObjectItemCaseSensitive(delta, m->string))
                continue;
            double d = num_or_zero(flat[1], m->string) -
                       num_or_zero(flat[0], m->string);
            ok = ok && cJSON_AddNumberToObject(delta, m->string, d);
        }
    }
    if (!ok) {
        code = cli_fail(c, &(struct fo_err){FO_E_NOMEM, "out of memory"});
        goto out;
    }
    if (c->json) {
        res = cJSON_CreateObject();
        if (!res) {
            code = 3;
            goto out;
        }
        cJSON_AddItemToObject(res, "a", sum[0]);
        cJSON_AddItemToObject(res, "b", sum[1]);
        cJSON_AddItemToObject(res, "delta", delta);
        sum[0] = sum[1] = delta = NULL;
        cli_print_json(res, 0);
        goto out;
    }
    printf("%-40s %14s %14s %14s\n", "count", "A", "B", "delta");
    const cJSON *m;
    cJSON_ArrayForEach (m, delta) {
        char a[FO_JSON_NUM_MAX], b[FO_JSON_NUM_MAX], d[FO_JSON_NUM_MAX];
        fo_json_number(num_or_zero(flat[0], m->string), a);
        fo_json_number(num_or_zero(flat[1], m->string), b);
        fo_json_number(m->valuedouble, d);
        printf("%-40s %14s %14s %s%13s\n", m->string, a, b,
               m->valuedouble > 0 ? "+" : " ", d);
    }
out:
    cJSON_Delete(sum[0]);
    cJSON_Delete(sum[1]);
    cJSON_Delete(flat[0]);
    cJSON_Delete(flat[1]);
    cJSON_Delete(delta);
    cJSON_Delete(res);
    return code;
}
