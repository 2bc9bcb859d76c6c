/* cli_submit: `forum submit REQUEST` and `forum plan REQUEST`: the control
 * loop in this process on the ledger dir, through the handler table (so
 * --json prints exactly what POST /submit and POST /plan serve). */
#include "cli/cli.h"
#include "cli/cli_opt.h"
#include "daemon/orch_sandbox.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/orch.h"
#include "daemon/service.h"
#include "daemon/orch_model.h"
#include "ledger/fo_json.h"
#include "surfaces/surf.h"

static const char submit_usage[] =
    "usage: forum submit REQUEST... [--cmd CMD | providers] [options]\n"
    "Answers a request end to end and witnesses every step: route, plan\n"
    "(the coordinator model), tasks and results, verdicts (done_when\n"
    "assertions, then the validator model), escalation up the model tiers\n"
    "on a failed verdict, synthesis and the answer. Words are joined with\n"
    "spaces. Without a model provider every role is a deterministic stub:\n"
    "one task on the routed lane, verdicts pass, the answer joins the\n"
    "outputs.\n"
    "tasks on the cli and default lanes:\n"
    "  --cmd CMD          tasks run as CMD PROMPT (never through a shell);\n"
    "                     not with model providers\n" CLI_PROVIDER_HELP
    "options:\n"
    "  --max-model-calls N  the run's model calls (default and ceiling 32;\n"
    "                       at most 1000); when spent the run stops with a\n"
    "                       `budget` entry and a fixed answer\n"
    "  --max-seconds S      the run's wall-clock budget\n"
    "  --intent-judge       a model judges if the answer covers the request\n"
    "  --checkpoint-each-wave  a signed checkpoint after each wave\n"
    "  --use-capsule-context   the ledger's capsule as context\n" CLI_GATE_HELP
        CLI_SESSION_HELP
    "  --roster FILE        the roster (default: the built-in one)\n"
    "  --sandbox bwrap|none where agents' commands run (default bwrap)\n"
    "  --workspace DIR      where agents' tools act (default: a fresh\n"
    "                       DIR/workspaces/run-<id>)\n"
    "  --timeout SECONDS    per task and per model call (default 300)\n"
    "  --json               print {answer, ..., receipt}\n"
    "exit codes: 0 answered (also when the budget stopped the run: see\n"
    "budget_spent), 2 usage, 3 I/O, storage, a model that cannot be\n"
    "reached or that answered nonsense (no valid plan: code bad_upstream)\n"
    "examples:\n"
    "  forum submit \"add a login endpoint to the api server\"\n"
    "  forum --json submit --use-capsule-context \"go on\"\n"
    "  forum submit --tier cheap --chat-url http://127.0.0.1:11434 --model "
    "qwen3:8b \"fix the failing test\"\n";

static const char plan_usage[] =
    "usage: forum plan REQUEST... [providers] [--roster FILE] [--json]\n"
    "Asks the coordinator (a capable-tier model) for a plan and prints it\n"
    "without running it. The request, route and plan are "
    "witnessed.\n" CLI_PROVIDER_HELP "options:\n"
    "  --roster FILE      the roster (default: the built-in one)\n"
    "  --timeout SECONDS  per model call (default 300)\n"
    "  --json             print {plan, ...} as POST /plan does\n"
    "Without --json: the route, then each wave's tasks (id, agent, the\n"
    "instruction's start), what each waits for and its done_when.\n"
    "examples:\n"
    "  forum plan \"add a login endpoint and its tests\" --tier capable "
    "--api\n"
    "  forum --json plan \"add a login endpoint\" > plan.json\n";

struct submit_opts {
    struct fo_buf text;
    struct orch_config cfg;
    struct cli_providers prov;
    long long max_calls, max_seconds;
    cJSON *gates;
    struct cli_session_opts sess;
    int sandbox_given;
    int sandbox;
    int judge, cp_waves, capsule;
};

/* The options of submit (plan takes the providers, --roster and --timeout
 * only: it plans, it runs nothing). */
static int parse(struct cli *c, const char *name, int argc, char **argv,
                 struct submit_opts *o)
{
    int is_plan = !strcmp(name, "plan");
    const char *sandbox = NULL;
    long long timeout = 0;
    struct cli_opt_call prov = {cli_provider_call, &o->prov},
                        gate = {cli_gate_call, &o->gates},
                        sess = {cli_session_call, &o->sess};
    const struct cli_opt plan_opts[] = {
        CLI_PROVIDER_OPTS(&prov),
        {"--roster", "FILE", CLI_OPT_STR, &o->cfg.roster_path, 0, 0, NULL, NULL,
         "the roster (default: the built-in one)"},
        {"--timeout", "SECONDS", CLI_OPT_INT, &timeout, 1, 86400, NULL, NULL,
         "per task and per model call (default 300)"},
        CLI_OPT_END,
    };
    const struct cli_opt submit_opts[] = {
        CLI_PROVIDER_OPTS(&prov),
        {"--roster", "FILE", CLI_OPT_STR, &o->cfg.roster_path, 0, 0, NULL, NULL,
         "the roster (default: the built-in one)"},
        {"--timeout", "SECONDS", CLI_OPT_INT, &timeout, 1, 86400, NULL, NULL,
         "per task and per model call (default 300)"},
        {"--cmd", "CMD", CLI_OPT_STR, &o->cfg.cmd, 0, 0, NULL, NULL,
         "tasks run as CMD PROMPT (not with model providers)"},
        {"--workspace", "DIR", CLI_OPT_STR, &o->cfg.workspace, 0, 0, NULL, NULL,
         "where agents' tools act"},
        {"--sandbox", "bwrap|none", CLI_OPT_STR, &sandbox, 0, 0, NULL, NULL,
         "where agents' commands run (default bwrap)"},
        {"--max-model-calls", "N", CLI_OPT_INT, &o->max_calls, 1,
         ORCH_SUBMIT_CALLS_MAX, NULL, NULL, "the run's model calls"},
        {"--max-seconds", "S", CLI_OPT_INT, &o->max_seconds, 1,
         ORCH_SUBMIT_SECONDS_MAX, NULL, NULL, "the run's wall-clock budget"},
        {"--intent-judge", NULL, CLI_OPT_BOOL, &o->judge, 0, 0, NULL, NULL,
         "a model judges whether the answer covers the request"},
        {"--checkpoint-each-wave", NULL, CLI_OPT_BOOL, &o->cp_waves, 0, 0, NULL,
         NULL, "a signed checkpoint after every wave"},
        {"--use-capsule-context", NULL, CLI_OPT_BOOL, &o->capsule, 0, 0, NULL,
         NULL, "the ledger's capsule as the run's context"},
        CLI_GATE_OPTS(&gate),
        CLI_SESSION_OPTS(&sess),
        CLI_OPT_END,
    };
    const char **words = calloc((size_t)argc + 1, sizeof(*words));
    if (!words)
        return cli_fail(c, &(struct fo_err){FO_E_NOMEM, "out of memory"});
    int nw = 0;
    int ex = cli_parse(c, name, argc, argv, is_plan ? plan_opts : submit_opts,
                       words, argc, &nw);
    for (int i = 0; !ex && i < nw; i++)
        if ((i && fo_buf_putc(&o->text, ' ')) ||
            fo_buf_puts(&o->text, words[i]))
            ex = cli_usage_error(c, "%s: request over %u bytes", name,
                                 ORCH_REQUEST_MAX);
    free(words);
    if (ex)
        return ex;
    if (timeout)
        o->cfg.timeout_ms = (int)(timeout * 1000);
    if (sandbox) {
        o->sandbox = orch_sandbox_mode_parse(sandbox);
        if (o->sandbox < 0)
            return cli_usage_error(c, "%s: --sandbox %s: bwrap or none", name,
                                   sandbox);
        o->sandbox_given = 1;
    }
    if (!nw)
        return cli_usage_error(c, "%s: no REQUEST", name);
    if (o->cfg.cmd && o->prov.given)
        return cli_usage_error(c,
                               "%s: give --cmd or model providers "
                               "(--chat-url, --api), not both",
                               name);
    return 0;
}

/* s on one line of at most max bytes: control characters as spaces, runs
 * of spaces as one, cut (never inside a UTF-8 sequence) with "..." */
static void preview(const char *s, size_t max, char *out, size_t cap)
{
    size_t o = 0, lim = max < cap - 1 ? max : cap - 1;
    int cut = 0;
    for (; *s; s++) {
        char ch = (unsigned char)*s < 0x20 ? ' ' : *s;
        if (ch == ' ' && (o == 0 || out[o - 1] == ' '))
            continue;
        if (o == lim) {
            cut = 1;
            break;
        }
        out[o++] = ch;
    }
    if (cut) {
        o = lim > 3 ? lim - 3 : 0;
        while (o > 0 && ((unsigned char)out[o] & 0xC0) == 0x80)
            o--;
        memcpy(out + o, "...", 3);
        o += 3;
    }
    while (o > 0 && out[o - 1] == ' ')
        o--;
    out[o] = '\0';
}

/* The task of plan with this id, or NULL. */
static const cJSON *plan_task(const cJSON *tasks, const char *id)
{
    const cJSON *t;
    cJSON_ArrayForEach (t, tasks)
        if (!strcmp(cli_str_or(t, "id", ""), id))
            return t;
    return NULL;
}

/* One task's rows: id, agent and the instruction's start, then what it
 * waits for and its done_when, under the instruction. */
static void plan_task_rows(const cJSON *t, int idw, int agw)
{
    char text[512];
    preview(cli_str_or(t, "instruction", ""), (size_t)(76 - idw - agw - 6),
            text, sizeof(text));
    printf("  %-*s  %-*s  %s\n", idw, cli_str_or(t, "id", "?"), agw,
           cli_str_or(t, "agent", "?"), text);
    int pad = 2 + idw + 2 + agw + 2;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "depends_on");
    if (cJSON_GetArraySize(d) > 0) {
        printf("%*safter", pad, "");
        const cJSON *x;
        int k = 0;
        cJSON_ArrayForEach (x, d)
            printf("%s %s%s", k++ ? "," : "", cli_str_or(x, "id", "?"),
                   strcmp(cli_str_or(x, "type", "data"), "order")
                       ? ""
                       : " (order only)");
        printf("\n");
    }
    const cJSON *dw = cJSON_GetObjectItemCaseSensitive(t, "done_when");
    if (dw && !cJSON_IsNull(dw)) {
        char *js = cJSON_IsString(dw) ? NULL : cJSON_PrintUnformatted(dw);
        preview(js ? js : dw->valuestring, (size_t)(76 - pad - 11), text,
                sizeof(text));
        printf("%*sdone when: %s\n", pad, "", text);
        cJSON_free(js);
    }
}

/* `forum plan` for people: the route, then the plan wave by wave. */
static void print_plan_text(const cJSON *out)
{
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(out, "plan");
    const cJSON *tasks = cJSON_GetObjectItemCaseSensitive(plan, "tasks");
    const cJSON *waves = cJSON_GetObjectItemCaseSensitive(plan, "waves");
    int idw = 2, agw = 5; /* "ID", "AGENT" */
    const cJSON *t;
    cJSON_ArrayForEach (t, tasks) {
        int n = (int)strlen(cli_str_or(t, "id", "?"));
        idw = n > idw ? (n < 16 ? n : 16) : idw;
        n = (int)strlen(cli_str_or(t, "agent", "?"));
        agw = n > agw ? (n < 20 ? n : 20) : agw;
    }
    int nt = cJSON_GetArraySize(tasks), nw = cJSON_GetArraySize(waves);
    printf("plan: %d task%s in %d wave%s; lane %s (by %s), model %s\n", nt,
           nt == 1 ? "" : "s", nw, nw == 1 ? "" : "s",
           cli_str_or(out, "lane", "?"), cli_str_or(out, "lane_by", "?"),
           cli_str_or(out, "model", "?"));
    printf("witnessed: request seq %lld, plan seq %lld\n",
           cli_int_or(out, "request_seq", -1), cli_int_or(out, "plan_seq", -1));
    const cJSON *w;
    int k = 0;
    cJSON_ArrayForEach (w, waves) {
        printf("\nwave %d\n", ++k);
        printf("  %-*s  %-*s  %s\n", idw, "ID", agw, "AGENT", "INSTRUCTION");
        const cJSON *id;
        cJSON_ArrayForEach (id, w) {
            const cJSON *task =
                cJSON_IsString(id) ? plan_task(tasks, id->valuestring) : NULL;
            if (task)
                plan_task_rows(task, idw, agw);
        }
    }
}

/* Ctrl-C while the run works in this process: the run cannot go on
 * without it, so say so (and where its steps are) before the exit status
 * of an interrupt. Only async-signal-safe calls. */
static void on_interrupt(int sig)
{
    (void)sig;
    static const char msg[] =
        "\nforum: interrupted: the run stopped with this process (it ran "
        "here, not on a daemon); the steps it took are on the ledger: "
        "`forum run list --state interrupted`, then `forum run show ID`\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(130);
}

static int run(struct cli *c, const char *name, const char *method,
               const char *usage, int argc, char **argv)
{
    struct submit_opts o = {0};
    fo_buf_init(&o.text, ORCH_REQUEST_MAX);
    struct orch *orch = NULL;
    struct daemon_config dc; /* DIR/forum.json, for its "models" */
    daemon_config_init(&dc);
    dc.dir = c->ledger_dir;
    struct ledger *l = NULL;
    cJSON *in = NULL, *out = NULL;
    struct fo_err err;
    fo_err_clear(&err);
    int code = parse(c, name, argc, argv, &o);
    if (code == CLI_PARSE_HELP) {
        code = cli_help(usage);
        goto out;
    }
    if (code)
        goto out;
    /* The provider flags, else the providers (with their tiers) of the data
     * dir's forum.json "models", as `forum serve` uses them. */
    if (daemon_config_load(&dc, &err) != FO_OK) {
        code = cli_fail(c, &err);
        goto out;
    }
    code = cli_provider_apply(c, name, &o.prov, &dc);
    if (code)
        goto out;
    if (dc.has_models) {
        if (o.cfg.timeout_ms && !dc.models.timeout_ms)
            dc.models.timeout_ms = o.cfg.timeout_ms;
        o.cfg.models = &dc.models;
    }
    char wsroot[4096];
    snprintf(wsroot, sizeof(wsroot), "%s/workspaces", c->ledger_dir);
    o.cfg.workspace_root = wsroot;
    o.cfg.mcp_servers = dc.mcp_servers;
    o.cfg.sandbox = o.sandbox_given ? o.sandbox : dc.sandbox;
    o.cfg.context = dc.context;
    o.cfg.data_dir = c->ledger_dir;
    o.cfg.cmd_sandbox = dc.cmd_sandbox;
    o.cfg.disk_reserve_mb = dc.disk_reserve_mb;
    int rc = orch_create(&o.cfg, &orch, &err);
    if (rc) {
        if (rc == FO_E_NOT_FOUND) /* a roster file that is not there */
            err.code = FO_E_INVALID;
        code = cli_fail(c, &err);
        goto out;
    }
    code = cli_open(c, LEDGER_OPEN_CREATE, &l);
    if (code)
        goto out;
    in = cJSON_CreateObject();
    if (!in || !cJSON_AddStringToObject(in, "request", o.text.data) ||
        (o.max_calls > 0 &&
         !fo_json_add_int(in, "max_model_calls", o.max_calls)) ||
        (o.max_seconds > 0 &&
         !fo_json_add_int(in, "max_seconds", o.max_seconds)) ||
        (o.gates &&
         !cJSON_AddItemToObject(in, "gates", cJSON_Duplicate(o.gates, 1))) ||
        (o.sess.session &&
         !cJSON_AddStringToObject(in, "session", o.sess.session)) ||
        (o.sess.context &&
         !cJSON_AddItemToObject(in, "context",
                                cJSON_Duplicate(o.sess.context, 1))) ||
        (o.judge && !cJSON_AddTrueToObject(in, "intent_judge")) ||
        (o.cp_waves && !cJSON_AddTrueToObject(in, "checkpoint_each_wave")) ||
        (o.capsule && !cJSON_AddTrueToObject(in, "use_capsule_context"))) {
        code = cli_fail(c, &(struct fo_err){FO_E_NOMEM, "out of memory"});
        goto out;
    }
    struct surf_ctx ctx = {.ledger = l, .orch = orch};
    struct sigaction sa = {.sa_handler = on_interrupt};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    /* the run on the engine forum serve runs, hosted in this process */
    rc =
        cli_call_hosted(c->ledger_dir, &dc, orch, &ctx, method, in, &out, &err);
    if (rc) {
        code = cli_fail(c, &err);
        goto out;
    }
    if (c->json) {
        cli_print_json(out, 0);
    } else if (!strcmp(method, "submit")) {
        const cJSON *ans = cJSON_GetObjectItemCaseSensitive(out, "answer");
        cli_tty_puts(stdout, ans->valuestring); /* a model's text */
        putchar('\n');
        long long rs = 0, as = 0;
        fo_json_get_int(out, "request_seq", 0, INT64_MAX, &rs);
        fo_json_get_int(out, "answer_seq", 0, INT64_MAX, &as);
        long long unj = 0;
        fo_json_get_int(out, "unjudged", 0, INT64_MAX, &unj);
        fprintf(
            stderr, "forum: request seq %lld, answer seq %lld, %s%s\n", rs, as,
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "ok"))
                ? "every task passed"
            : unj ? "some tasks were not judged (no done_when criteria, or "
                    "no model to judge them)"
                  : "not every task passed",
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "budget_spent"))
                ? "; the budget was spent"
                : "");
        const cJSON *ij = cJSON_GetObjectItemCaseSensitive(out, "intent");
        if (cJSON_IsObject(ij))
            fprintf(stderr, "forum: intent judge: %s%s\n",
                    cli_str_or(ij, "covers", NULL) ? "covers " : "not run: ",
                    cli_str_or(ij, "covers", NULL)
                        ? cli_str_or(ij, "covers", "")
                        : cli_str_or(ij, "skipped", "no verdict"));
        if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(out, "models")))
            fprintf(stderr, "forum: no model provider is configured, so no "
                            "model was used (see --chat-url, --api, --tier "
                            "or forum.json)\n");
    } else {
        print_plan_text(out);
        if (!strcmp(cli_str_or(out, "model", ""), "stub"))
            fprintf(stderr, "forum: no model provider is configured, so the "
                            "stub planner made one task on the routed lane "
                            "(see --chat-url, --api, --tier or "
                            "forum.json)\n");
    }
out:
    cJSON_Delete(in);
    cJSON_Delete(out);
    ledger_close(l);
    orch_free(orch);
    daemon_config_release(&dc);
    fo_buf_release(&o.text);
    cJSON_Delete(o.gates);
    cJSON_Delete(o.sess.context);
    return code;
}

int cli_submit(struct cli *c, int argc, char **argv)
{
    return run(c, "submit", "submit", submit_usage, argc, argv);
}

int cli_plan(struct cli *c, int argc, char **argv)
{
    return run(c, "plan", "plan", plan_usage, argc, argv);
}
