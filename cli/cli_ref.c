/* cli_ref: the Python reference's operator commands on forum: `forum
 * status`, `doctor`, `demo`, `humanize`, `runtime inspect`, `context
 * preflight`, `import-trace`, `ledger capsule` and `ledger room`. Each goes
 * through the handler table, so --json prints what HTTP and MCP serve
 * (docs/COMPATIBILITY.md). */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch.h"
#include "daemon/orch_views.h"
#include "daemon/service.h"
#include "ledger/fo_json.h"
#include "surfaces/surf.h"

/* The orchestrator DIR/forum.json describes (roster, providers, sandbox),
 * as `forum serve` and `forum mcp` build it. Prints the error and returns
 * the exit code on failure. */
static int conf_orch(struct cli *c, struct daemon_config *dc, struct orch **o)
{
    struct fo_err err;
    fo_err_clear(&err);
    daemon_config_init(dc);
    dc->dir = c->ledger_dir;
    if (daemon_config_load(dc, &err) != FO_OK)
        return cli_fail(c, &err);
    struct orch_config oc = {
        .roster_path = dc->roster,
        .cmd = dc->cmd,
        .models = dc->has_models ? &dc->models : NULL,
        .sandbox = dc->sandbox,
        .context = dc->context,
        .mcp_servers = dc->mcp_servers,
        .gates = dc->gates,
    };
    if (orch_create(&oc, o, &err) != FO_OK) {
        daemon_config_release(dc);
        if (err.code == FO_E_NOT_FOUND)
            err.code = FO_E_INVALID;
        return cli_fail(c, &err);
    }
    return 0;
}

/* Calls method with in (consumed) on the ledger (read-only) and, when
 * with_orch, the configured orchestrator. */
static int call(struct cli *c, const char *method, cJSON *in, int with_orch,
                cJSON **out)
{
    struct daemon_config dc;
    struct orch *o = NULL;
    struct ledger *l = NULL;
    int ex = with_orch ? conf_orch(c, &dc, &o) : 0;
    if (ex) {
        cJSON_Delete(in);
        return ex;
    }
    ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (!ex) {
        struct surf_ctx ctx = {.ledger = l, .orch = o};
        struct fo_err err;
        fo_err_clear(&err);
        if (surf_call(&ctx, surf_find(method), in, out, &err))
            ex = cli_fail(c, &err);
    }
    cJSON_Delete(in);
    ledger_close(l);
    if (with_orch) {
        orch_free(o);
        daemon_config_release(&dc);
    }
    return ex;
}

static const char *str(const cJSON *o, const char *k)
{
    return cli_str_or(o, k, "");
}

/* "status=S tool=forum command=C", then each next action. */
static void envelope_text(const cJSON *env)
{
    printf("status=%s tool=%s command=%s\n", str(env, "status"),
           str(env, "tool"), str(env, "command"));
    const cJSON *a;
    cJSON_ArrayForEach (a,
                        cJSON_GetObjectItemCaseSensitive(env, "next_actions"))
        printf("next: %s %s - %s\n", str(a, "tool"), str(a, "action"),
               str(a, "reason"));
}

/* ---- status, doctor ----------------------------------------------------- */

static const char status_usage[] =
    "usage: forum status [--json]\n"
    "The ledger and its runs at a glance, as the reference's status envelope\n"
    "(project-telos.flagship-action/v1): entries, checkpoint (the live tree's\n"
    "root), runs by state, gates waiting. `forum serve status` is the\n"
    "daemon's.\n"
    "example:\n  forum status --json\n";

int cli_status(struct cli *c, int argc, char **argv)
{
    const struct cli_opt opts[] = {CLI_OPT_END};
    int pe = cli_parse(c, "status", argc, argv, opts, NULL, 0, NULL);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(status_usage) : pe;
    cJSON *out = NULL;
    int ex = call(c, "operator_status", NULL, 0, &out);
    if (ex)
        return ex;
    if (c->json) {
        cli_print_json(out, 0);
    } else {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(out, "native"), *r;
        printf("entries: %lld\ncheckpoint: %s\ngates waiting: %lld\nruns:",
               cli_int_or(n, "entries", 0), str(n, "checkpoint"),
               cli_int_or(n, "gates_waiting", 0));
        cJSON_ArrayForEach (r, cJSON_GetObjectItemCaseSensitive(n, "runs"))
            printf(" %s=%lld", r->string, (long long)r->valuedouble);
        printf("\n");
        envelope_text(out);
    }
    cJSON_Delete(out);
    return 0;
}

static const char doctor_usage[] =
    "usage: forum doctor [--timeout S] [--json]\n"
    "Checks what an operator needs, with DIR/forum.json's configuration:\n"
    "each model provider answers one short call (the one that does not is\n"
    "named with its URL), the sandbox can be made, the store opens and its\n"
    "chain verifies, the token and checkpoint key are private (mode 600),\n"
    "the disk has 64 MiB free. Exit 1 when any check fails.\n"
    "  --timeout S   seconds each provider has to answer (default 15)\n"
    "example:\n  forum doctor\n";

int cli_doctor(struct cli *c, int argc, char **argv)
{
    long long timeout = 0;
    const struct cli_opt opts[] = {
        {"--timeout", "S", CLI_OPT_INT, &timeout, 1, 300, NULL, NULL,
         "seconds each provider has to answer"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "doctor", argc, argv, opts, NULL, 0, NULL);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(doctor_usage) : pe;
    cJSON *in = cJSON_CreateObject();
    if (in && timeout)
        fo_json_add_int(in, "timeout_s", timeout);
    cJSON *out = NULL;
    int ex = call(c, "doctor", in, 1, &out);
    if (ex)
        return ex;
    int drift = strcmp(str(out, "status"), "MATCH") != 0;
    if (c->json) {
        cli_print_json(out, 0);
    } else {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(out, "native"), *k;
        cJSON_ArrayForEach (k, cJSON_GetObjectItemCaseSensitive(n, "checks"))
            printf("%-5s  %-10s %s\n",
                   strcmp(str(k, "status"), "MATCH") ? "FAIL" : "ok",
                   str(k, "name"), str(k, "detail"));
        envelope_text(out);
    }
    cJSON_Delete(out);
    return drift ? 1 : 0;
}

/* ---- humanize ----------------------------------------------------------- */

static const char humanize_usage[] =
    "usage: forum humanize TEXT [--audience A] [--profile P] [--json]\n"
    "Plainer wording for people, adding no fact: a model's preamble dropped,\n"
    "stock phrases shortened; then the text checked against a delivery\n"
    "profile (operator, engineer, researcher, executive). No model.\n"
    "example:\n  forum humanize \"As an AI, we utilize tests in order to fix "
    "bugs\"\n";

int cli_humanize(struct cli *c, int argc, char **argv)
{
    const char *audience = NULL, *profile = NULL, *pos[1];
    int npos = 0;
    const struct cli_opt opts[] = {
        {"--audience", "A", CLI_OPT_STR, &audience, 0, 0, NULL, NULL,
         "who reads it (default operator)"},
        {"--profile", "P", CLI_OPT_STR, &profile, 0, 0, NULL, NULL,
         "the delivery profile to check against"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "humanize", argc, argv, opts, pos, 1, &npos);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(humanize_usage) : pe;
    if (!npos)
        return cli_usage_error(c, "humanize: TEXT is required");
    cJSON *in = cJSON_CreateObject();
    if (!in || !cJSON_AddStringToObject(in, "text", pos[0]) ||
        (audience && !cJSON_AddStringToObject(in, "audience", audience)) ||
        (profile && !cJSON_AddStringToObject(in, "profile", profile))) {
        cJSON_Delete(in);
        return cli_usage_error(c, "out of memory");
    }
    struct surf_ctx ctx = {0};
    struct fo_err err;
    cJSON *out = NULL;
    fo_err_clear(&err);
    int rc = surf_call(&ctx, surf_find("humanize"), in, &out, &err);
    cJSON_Delete(in);
    if (rc)
        return cli_fail(c, &err);
    if (c->json)
        cli_print_json(out, 0);
    else
        printf("%s\n", str(out, "output"));
    cJSON_Delete(out);
    return 0;
}

/* ---- runtime inspect, context preflight -------------------------------- */

static const char runtime_usage[] =
    "usage: forum runtime inspect [--json]\n"
    "What would run, without running a model: the executor of the control\n"
    "roles and of each tier (DIR/forum.json's providers, a command, or the\n"
    "stub), the roster's lanes by tier, the policy, and what keeps it from\n"
    "being ready.\n"
    "example:\n  forum runtime inspect --json\n";

static void spec_line(const char *label, const cJSON *s)
{
    printf("%s%s %s (%s)\n", label, str(s, "kind"), str(s, "id"),
           str(s, "source"));
}

int cli_runtime(struct cli *c, int argc, char **argv)
{
    if (argc < 2 || cli_is_help(argv[1])) {
        fputs(runtime_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "inspect"))
        return cli_bad_sub(c, "runtime", argv[1], "inspect");
    const struct cli_opt opts[] = {CLI_OPT_END};
    int pe = cli_parse(c, "runtime inspect", argc - 1, argv + 1, opts, NULL, 0,
                       NULL);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(runtime_usage) : pe;
    cJSON *out = NULL;
    int ex = call(c, "runtime_inspect", NULL, 1, &out);
    if (ex)
        return ex;
    if (c->json) {
        cli_print_json(out, 0);
    } else {
        const cJSON *t, *x;
        printf("ready: %s\n",
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "ready"))
                   ? "yes"
                   : "no");
        spec_line("default: ",
                  cJSON_GetObjectItemCaseSensitive(out, "default"));
        cJSON_ArrayForEach (t, cJSON_GetObjectItemCaseSensitive(out, "tiers")) {
            printf("- %s: ", t->string);
            spec_line("", t);
        }
        cJSON_ArrayForEach (x, cJSON_GetObjectItemCaseSensitive(out, "issues"))
            printf("issue: %s\n", x->valuestring);
    }
    cJSON_Delete(out);
    return 0;
}

static const char context_usage[] =
    "usage: forum context preflight REQUEST [--session NAME]\n"
    "       [--context-token-budget N] [--request-context-token-budget N]\n"
    "       [--use-capsule-context [--max-items N] [--max-text-chars N]]\n"
    "What a request would send to the models, writing nothing: each slice\n"
    "of the context with its tokens and what the budget does with it; with\n"
    "--use-capsule-context, also the size of the ledger's capsule.\n"
    "example:\n  forum context preflight \"add a login endpoint\" "
    "--context-token-budget 4000\n";

int cli_context(struct cli *c, int argc, char **argv)
{
    if (argc < 2 || cli_is_help(argv[1])) {
        fputs(context_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "preflight"))
        return cli_bad_sub(c, "context", argv[1], "preflight");
    const char *session = NULL, *pos[1];
    long long total = 0, req = 0, items = -1, chars = -1;
    int capsule = 0, npos = 0;
    const struct cli_opt opts[] = {
        {"--session", "NAME", CLI_OPT_STR, &session, 0, 0, NULL, NULL,
         "a turn of session NAME"},
        {"--context-token-budget", "N", CLI_OPT_INT, &total, 1, 10000000, NULL,
         NULL, "the whole context's budget in tokens"},
        {"--request-context-token-budget", "N", CLI_OPT_INT, &req, 1, 10000000,
         NULL, NULL, "the request's share"},
        {"--use-capsule-context", NULL, CLI_OPT_BOOL, &capsule, 0, 0, NULL,
         NULL, "count the ledger's capsule too"},
        {"--max-items", "N", CLI_OPT_INT, &items, 0, 1000, NULL, NULL,
         "task items of the capsule"},
        {"--max-text-chars", "N", CLI_OPT_INT, &chars, 0, 65536, NULL, NULL,
         "characters kept of each capsule text"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "context preflight", argc - 1, argv + 1, opts, pos, 1,
                       &npos);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(context_usage) : pe;
    if (!npos)
        return cli_usage_error(c, "context preflight: REQUEST is required");
    cJSON *in = cJSON_CreateObject();
    int ok =
        in && cJSON_AddStringToObject(in, "request", pos[0]) &&
        (!session || cJSON_AddStringToObject(in, "session", session)) &&
        (!total || fo_json_add_int(in, "context_token_budget", total)) &&
        (!req || fo_json_add_int(in, "request_context_token_budget", req)) &&
        (!capsule || cJSON_AddTrueToObject(in, "use_capsule_context")) &&
        (items < 0 || fo_json_add_int(in, "max_items", items)) &&
        (chars < 0 || fo_json_add_int(in, "max_text_chars", chars));
    if (!ok) {
        cJSON_Delete(in);
        return cli_usage_error(c, "out of memory");
    }
    cJSON *out = NULL;
    int ex = call(c, "context_preflight", in, 0, &out);
    if (!ex)
        cli_print_json(out, !c->json);
    cJSON_Delete(out);
    return ex;
}

/* ---- import-trace -------------------------------------------------------- */

static const char import_trace_usage[] =
    "usage: forum import-trace FILE [--format F]\n"
    "The reference's name for `forum import F FILE`: otel, langsmith, or\n"
    "generic (forum reads it as jsonl, one event a line; the default).\n"
    "agentops traces are not read (docs/COMPATIBILITY.md).\n"
    "example:\n  forum import-trace trace.json --format otel\n";

int cli_import_trace(struct cli *c, int argc, char **argv)
{
    const char *format = "generic", *pos[1];
    int npos = 0;
    const struct cli_opt opts[] = {
        {"--format", "F", CLI_OPT_STR, &format, 0, 0, NULL, NULL,
         "otel, langsmith, generic or jsonl"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "import-trace", argc, argv, opts, pos, 1, &npos);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(import_trace_usage) : pe;
    if (!npos)
        return cli_usage_error(c, "import-trace: FILE is required");
    const char *f = !strcmp(format, "generic") ? "jsonl" : format;
    if (strcmp(f, "otel") && strcmp(f, "langsmith") && strcmp(f, "jsonl"))
        return cli_usage_error(c,
                               "import-trace: --format %s: forum reads otel, "
                               "langsmith and generic (jsonl)",
                               format);
    static char word[] = "import";
    char *args[] = {word, (char *)(uintptr_t)f, (char *)(uintptr_t)pos[0],
                    NULL};
    return cli_import(c, 3, args);
}

/* ---- demo ---------------------------------------------------------------- */

static const char demo_usage[] =
    "usage: forum demo [--json]\n"
    "A whole run in a fresh data dir under $TMPDIR (kept, and named): a\n"
    "request answered on the deterministic stub, its run room, and the\n"
    "ledger verified. No model, no network, nothing in your own ledger.\n"
    "example:\n  forum demo\n";

int cli_demo(struct cli *c, int argc, char **argv)
{
    const struct cli_opt opts[] = {CLI_OPT_END};
    int pe = cli_parse(c, "demo", argc, argv, opts, NULL, 0, NULL);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(demo_usage) : pe;
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/forum-demo-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        return cli_fail(c, &(struct fo_err){FO_E_IO, "demo: cannot make a "
                                                     "directory"});
    struct cli dc = *c;
    dc.ledger_dir = dir;
    struct ledger *l = NULL;
    int ex = cli_open(&dc, LEDGER_OPEN_CREATE, &l);
    if (ex)
        return ex;
    struct surf_ctx ctx = {.ledger = l};
    struct fo_err err;
    fo_err_clear(&err);
    cJSON *in = cJSON_CreateObject(), *ans = NULL, *room = NULL, *ver = NULL;
    cJSON_AddStringToObject(in, "request",
                            "add a health endpoint to the api server");
    struct daemon_config hc;
    daemon_config_init(&hc);
    int rc = cli_call_hosted(dir, &hc, NULL, &ctx, "submit", in, &ans, &err);
    if (!rc)
        rc = surf_call(&ctx, surf_find("run_room"), NULL, &room, &err);
    if (!rc)
        rc = surf_call(&ctx, surf_find("ledger_verify"), NULL, &ver, &err);
    cJSON_Delete(in);
    ledger_close(l);
    cJSON *native = cJSON_CreateObject();
    if (!rc && native) {
        cJSON_AddStringToObject(native, "ledger", dir);
        cJSON_AddStringToObject(native, "answer", str(ans, "answer"));
        cJSON_AddItemToObject(
            native, "next_actions",
            cJSON_DetachItemFromObjectCaseSensitive(room, "next_actions"));
        cJSON_AddBoolToObject(
            native, "verified",
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ver, "ok")));
    }
    cJSON_Delete(ans);
    cJSON_Delete(room);
    cJSON_Delete(ver);
    if (rc) {
        cJSON_Delete(native);
        return cli_fail(c, &err);
    }
    cJSON *env = orch_envelope("demo", "MATCH", native);
    if (!env)
        return cli_fail(c, &(struct fo_err){FO_E_NOMEM, "out of memory"});
    if (c->json) {
        cli_print_json(env, 0);
    } else {
        printf(
            "ledger: %s\n%s\nverified: %s\n", dir, str(native, "answer"),
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(native, "verified"))
                ? "yes"
                : "no");
        printf("look around: forum --ledger %s ledger room --text\n", dir);
    }
    cJSON_Delete(env);
    return 0;
}

/* ---- ledger capsule, ledger room ---------------------------------------- */

static const char capsule_usage[] =
    "usage: forum ledger capsule [--max-items N] [--max-text-chars N] "
    "[--text]\n"
    "A deterministic brief of the whole ledger (forum.context-capsule/v1):\n"
    "checkpoint, whether it verifies, counts by kind, the latest request and\n"
    "answer, the last N task results, signals. The same ledger gives the\n"
    "same bytes. --text: the plain text a later run could take as context.\n"
    "example:\n  forum ledger capsule --max-items 4 --text\n";

int cli_ledger_capsule(struct cli *c, int argc, char **argv)
{
    long long items = -1, chars = -1;
    int text = 0;
    const struct cli_opt opts[] = {
        {"--max-items", "N", CLI_OPT_INT, &items, 0, 1000, NULL, NULL,
         "task results kept (default 8)"},
        {"--max-text-chars", "N", CLI_OPT_INT, &chars, 0, 65536, NULL, NULL,
         "characters kept of each text (default 240)"},
        {"--text", NULL, CLI_OPT_BOOL, &text, 0, 0, NULL, NULL,
         "the capsule as plain text"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "ledger capsule", argc, argv, opts, NULL, 0, NULL);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(capsule_usage) : pe;
    cJSON *in = cJSON_CreateObject();
    if (in && items >= 0)
        fo_json_add_int(in, "max_items", items);
    if (in && chars >= 0)
        fo_json_add_int(in, "max_text_chars", chars);
    cJSON *out = NULL;
    int ex = call(c, "ledger_capsule", in, 0, &out);
    if (ex)
        return ex;
    if (text && !c->json) {
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        if (orch_capsule_text(out, &b) == FO_OK)
            printf("%.*s\n", (int)b.len, b.data ? b.data : "");
        fo_buf_release(&b);
    } else {
        cli_print_json(out, !c->json);
    }
    cJSON_Delete(out);
    return 0;
}

static const char room_usage[] =
    "usage: forum ledger room [RUN] [--max-text-chars N] [--text]\n"
    "One operator view of a run, the latest when RUN is not given\n"
    "(forum.run-room/v1): request, route, plan, tasks with results and\n"
    "verdicts, the gates waiting, the answer, and the next actions (a gate\n"
    "waiting is a high-priority review_gate). --text: for people.\n"
    "example:\n  forum ledger room --text\n";

static void room_text(const cJSON *room)
{
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(room, "request");
    const cJSON *ans = cJSON_GetObjectItemCaseSensitive(room, "answer"), *x;
    printf("run: %lld (%s)\nverified: %s\n", cli_int_or(room, "run", -1),
           str(room, "state"),
           cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(room, "verified"))
               ? "yes"
               : "no");
    if (cJSON_IsObject(req))
        printf("request: %s\n", str(req, "text"));
    cJSON_ArrayForEach (x, cJSON_GetObjectItemCaseSensitive(room, "tasks"))
        printf("- %s/%s %s\n", str(x, "id"), str(x, "agent"), str(x, "state"));
    cJSON_ArrayForEach (x,
                        cJSON_GetObjectItemCaseSensitive(room, "pending_gates"))
        printf("gate waiting: wave %lld (%s)\n", cli_int_or(x, "wave", -1),
               str(x, "question"));
    if (cJSON_IsObject(ans))
        printf("answer: %s\n", str(ans, "text"));
    cJSON_ArrayForEach (x,
                        cJSON_GetObjectItemCaseSensitive(room, "next_actions"))
        printf("next (%s): %s\n", str(x, "priority"), str(x, "label"));
}

int cli_ledger_room(struct cli *c, int argc, char **argv)
{
    long long chars = -1;
    int text = 0, npos = 0;
    const char *pos[1];
    const struct cli_opt opts[] = {
        {"--max-text-chars", "N", CLI_OPT_INT, &chars, 0, 65536, NULL, NULL,
         "characters kept of each text (default 240)"},
        {"--text", NULL, CLI_OPT_BOOL, &text, 0, 0, NULL, NULL,
         "the room for people"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "ledger room", argc, argv, opts, pos, 1, &npos);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(room_usage) : pe;
    long long run = npos ? cli_parse_seq(pos[0]) : -1;
    if (npos && run < 0)
        return cli_usage_error(c, "ledger room: %s: not a run id", pos[0]);
    cJSON *in = cJSON_CreateObject();
    if (in && run >= 0)
        fo_json_add_int(in, "run", run);
    if (in && chars >= 0)
        fo_json_add_int(in, "max_text_chars", chars);
    cJSON *out = NULL;
    int ex = call(c, "run_room", in, 0, &out);
    if (ex)
        return ex;
    if (text && !c->json)
        room_text(out);
    else
        cli_print_json(out, !c->json);
    cJSON_Delete(out);
    return 0;
}
