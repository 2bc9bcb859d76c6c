/* cli_gate: `forum gate list|approve|edit|reject`: the approval gates of
 * runs waiting for a human. A decision goes to the daemon of the data dir
 * over HTTP when one is running (it holds the runs), else it is written on
 * the ledger here, where the process running the run (or the next daemon
 * to start) finds it. list reads the ledger and needs no daemon. */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/orch.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"

static const char help_gate[] =
    "usage: forum gate list [--run ID] [--json]\n"
    "       forum gate approve RUN WAVE [--approver NAME] [--note TEXT]\n"
    "       forum gate edit RUN WAVE --set TASK=INSTRUCTION... [--approver "
    "NAME]\n"
    "       forum gate reject RUN WAVE [--reason TEXT] [--approver NAME]\n"
    "Approval gates stop a run before a wave until a human decides. Which\n"
    "waves are gated is a policy: `--gate all|lane:NAME|category:NAME|"
    "wave:N`\n"
    "on serve, submit and run start (or \"gates\" in DIR/forum.json and in a\n"
    "request). A gated run reads `waiting` (forum run get) until:\n"
    "  approve   the wave runs as planned (gate_approved)\n"
    "  edit      the wave runs with new instructions for the tasks named\n"
    "            (gate_edited); --set T1=\"...\" once per task\n"
    "  reject    the run ends without running the wave (gate_rejected;\n"
    "            the run reads `rejected`)\n"
    "or its deadline passes (gate_expired: rejected, or approved when the\n"
    "policy says on_expiry approve), also while no daemon runs.\n"
    "Decisions go to the running daemon (POST /gate/approve|edit|reject,\n"
    "with its token); with none running they are written on the ledger for\n"
    "the next daemon to find. The approver (default: $USER,\n"
    "else the user the command runs as) is recorded.\n"
    "options:\n"
    "  --run ID           list: only this run's gates\n"
    "  --approver NAME    who decides (recorded in the entry)\n"
    "  --note TEXT        a note kept with the decision\n"
    "  --reason TEXT      reject: why\n"
    "  --set ID=TEXT      edit: the new instruction of task ID (repeat)\n"
    "  --run-seq N --wave N, --edit ID=TEXT\n"
    "                     the reference's spellings of RUN WAVE and --set\n"
    "  --json             print the method's result object\n"
    "examples:\n"
    "  forum gate list\n"
    "  forum gate approve 12 0 --approver alice\n"
    "  forum gate edit 12 1 --set T3=\"only touch the tests\"\n"
    "  forum gate reject 12 0 --reason \"wrong repository\"\n"
    "  forum gate approve --run-seq 12 --wave 0 --approver alice\n"
    "exit codes: 0 ok; 2 usage, no gate waits there (no_gate), decided\n"
    "already (gate_decided), a task not in the wave; 3 I/O, or the daemon\n"
    "cannot be reached\n";

static int cmd_list(struct cli *c, int argc, char **argv)
{
    long long run = -1;
    const struct cli_opt opts[] = {
        {"--run", "ID", CLI_OPT_INT, &run, 0, INT64_MAX, NULL, "not a run id",
         "only this run's gates"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "gate list", argc, argv, opts, NULL, 0, NULL);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(help_gate) : pe;
    struct ledger *l = NULL;
    int ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (ex)
        return ex;
    cJSON *in = cJSON_CreateObject(), *out = NULL;
    if (in && run >= 0)
        fo_json_add_int(in, "run", run);
    ex = cli_call(c, l, "gate_list", in, &out);
    ledger_close(l);
    if (ex)
        return ex;
    const cJSON *gates = cJSON_GetObjectItemCaseSensitive(out, "gates");
    if (c->json) {
        cli_print_json(out, 0);
    } else if (!cJSON_GetArraySize(gates)) {
        printf("no gate is waiting for a decision\n");
    } else {
        printf("%-6s %-4s %-25s %-8s %s\n", "RUN", "WAVE", "DEADLINE", "EXPIRY",
               "TASKS");
        const cJSON *g;
        cJSON_ArrayForEach (g, gates) {
            printf("%-6lld %-4lld %-25s %-8s", cli_int_or(g, "run_seq", -1),
                   cli_int_or(g, "wave", -1), cli_str_or(g, "deadline", "?"),
                   cli_str_or(g, "on_expiry", "?"));
            const cJSON *t;
            int first = 1;
            cJSON_ArrayForEach (t,
                                cJSON_GetObjectItemCaseSensitive(g, "tasks")) {
                printf("%s%s (%s)", first ? " " : ", ",
                       cli_str_or(t, "id", "?"), cli_str_or(t, "agent", "?"));
                first = 0;
            }
            printf("\n       %s\n", cli_str_or(g, "question", ""));
            cJSON_ArrayForEach (t, cJSON_GetObjectItemCaseSensitive(g, "tasks"))
                printf("       %s: %.200s\n", cli_str_or(t, "id", "?"),
                       cli_str_or(t, "instruction", ""));
        }
    }
    cJSON_Delete(out);
    return 0;
}

/* approve, edit, reject: RUN WAVE and the flags into the method's input. */
static int decide(struct cli *c, const char *what, int argc, char **argv)
{
    char method[32], path[32];
    snprintf(method, sizeof(method), "gate_%s", what);
    snprintf(path, sizeof(path), "/gate/%s", what);
    cJSON *in = cJSON_CreateObject();
    cJSON *edits = NULL;
    long long run = -1, wave = -1;
    int pos = 0, code = 0;
    const char *approver = getenv("USER");
    if (!approver || !*approver) { /* a service or a container: the uid */
        const struct passwd *pw = getpwuid(geteuid());
        approver = pw && pw->pw_name && *pw->pw_name ? pw->pw_name : NULL;
    }
    if (!in)
        return cli_usage_error(c, "out of memory");
    const char *note = NULL, *reason = NULL, *sets[64], *pos_v[8];
    int nsets = 0, npos = 0;
    const struct cli_opt reason_opt = {
        "--reason", "TEXT", CLI_OPT_STR, &reason, 0, 0, NULL, NULL, "why"};
    const struct cli_opt set_opt = {
        "--set", "ID=TEXT", CLI_OPT_LIST,
        sets,    0,         (long long)(sizeof(sets) / sizeof(sets[0])),
        &nsets,  NULL,      "the new instruction of task ID (repeat)"};
    const struct cli_opt edit_opt = {
        "--edit", "ID=TEXT", CLI_OPT_LIST,
        sets,     0,         (long long)(sizeof(sets) / sizeof(sets[0])),
        &nsets,   NULL,      "the reference's spelling of --set"};
    long long run_opt = -1, wave_opt = -1;
    const struct cli_opt end = CLI_OPT_END;
    /* every decision's options, and reject's --reason or edit's --set */
    const struct cli_opt table[] = {
        {"--approver", "NAME", CLI_OPT_STR, &approver, 0, 0, NULL, NULL,
         "who decides (recorded in the entry)"},
        {"--note", "TEXT", CLI_OPT_STR, &note, 0, 0, NULL, NULL,
         "a note kept with the decision"},
        {"--run-seq", "N", CLI_OPT_INT, &run_opt, 0, INT64_MAX, NULL,
         "not a run id", "RUN, as the reference spells it"},
        {"--wave", "N", CLI_OPT_INT, &wave_opt, 0, INT64_MAX, NULL,
         "not a wave number", "WAVE, as the reference spells it"},
        what[0] == 'r'   ? reason_opt
        : what[0] == 'e' ? set_opt
                         : end,
        what[0] == 'e' ? edit_opt : end,
        CLI_OPT_END,
    };
    char cmd[32];
    snprintf(cmd, sizeof(cmd), "gate %s", what);
    code = cli_parse(c, cmd, argc, argv, table, pos_v, 8, &npos);
    if (code == CLI_PARSE_HELP) {
        cJSON_Delete(in);
        return cli_help(help_gate);
    }
    if (!code && note)
        cJSON_AddStringToObject(in, "note", note);
    if (!code && reason)
        cJSON_AddStringToObject(in, "reason", reason);
    for (int k = 0; !code && k < nsets; k++) {
        const char *v = sets[k], *eq = strchr(v, '=');
        if (!eq || eq == v) {
            code = cli_usage_error(c, "gate edit: --set TASK=INSTRUCTION");
            break;
        }
        if (!edits)
            edits = cJSON_AddObjectToObject(in, "edits");
        char id[ORCH_NAME_MAX + 1];
        snprintf(id, sizeof(id), "%.*s", (int)(eq - v), v);
        cJSON_DeleteItemFromObjectCaseSensitive(edits, id);
        cJSON_AddStringToObject(edits, id, eq + 1);
    }
    for (; !code && pos < npos && pos < 2; pos++) {
        long long x = cli_parse_seq(pos_v[pos]);
        if (x < 0)
            code = cli_usage_error(c, "gate %s: %s: not a %s", what, pos_v[pos],
                                   pos ? "wave number" : "run id");
        *(pos ? &wave : &run) = x;
    }
    /* the reference's --run-seq and --wave stand for RUN and WAVE */
    if (!code && run_opt >= 0 && wave_opt >= 0 && npos == 0) {
        run = run_opt;
        wave = wave_opt;
        pos = 2;
    } else if (!code && (run_opt >= 0 || wave_opt >= 0)) {
        code = cli_usage_error(c,
                               "gate %s: give RUN WAVE, or both --run-seq "
                               "and --wave",
                               what);
    }
    if (!code && npos > 2)
        code = cli_usage_error(c, "gate %s: unexpected %s", what, pos_v[2]);
    if (!code && pos < 2)
        code = cli_usage_error(c, "gate %s: RUN and WAVE are required", what);
    if (!code && what[0] == 'e' && !edits)
        code = cli_usage_error(c, "gate edit: give --set TASK=INSTRUCTION");
    if (!code && (!approver || !*approver))
        code = cli_usage_error(c, "gate %s: --approver NAME (no $USER)", what);
    if (code) {
        cJSON_Delete(in);
        return code;
    }
    fo_json_add_int(in, "run_seq", run);
    fo_json_add_int(in, "wave", wave);
    cJSON_AddStringToObject(in, "approver", approver);
    struct fo_err err;
    fo_err_clear(&err);
    struct cli_daemon d;
    cJSON *out = NULL;
    int rc = cli_daemon_find(c, &d, &err);
    if (rc == FO_OK) {
        struct fo_buf body;
        fo_buf_init(&body, FO_BUF_UNLIMITED);
        rc = fo_json_canon(in, &body, &err);
        if (!rc)
            rc = cli_daemon_call(&d, "POST", path, body.data, &out, &err);
        fo_buf_release(&body);
        cJSON_Delete(in);
    } else if (rc == FO_E_NOT_FOUND) {
        struct ledger *l = NULL;
        int ex = cli_open(c, 0, &l);
        if (ex) {
            cJSON_Delete(in);
            return ex;
        }
        fo_err_clear(&err);
        rc = cli_call_err(l, method, in, &out, &err);
        ledger_close(l);
    } else {
        cJSON_Delete(in);
    }
    if (rc)
        return cli_fail(c, &err);
    if (c->json)
        cli_print_json(out, 0);
    else
        printf("run %lld wave %lld: %s (entry %lld)\n", run, wave,
               cli_str_or(out, "decision", "?"), cli_int_or(out, "seq", -1));
    cJSON_Delete(out);
    return 0;
}

int cli_gate(struct cli *c, int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error(c, "gate: no command (list, approve, edit or "
                                  "reject)");
    const char *sub = argv[1];
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i]) || !strcmp(argv[i], "help"))
            return cli_help(help_gate);
    if (!strcmp(sub, "list"))
        return cmd_list(c, argc - 1, argv + 1);
    if (!strcmp(sub, "approve") || !strcmp(sub, "edit") ||
        !strcmp(sub, "reject"))
        return decide(c, sub, argc - 1, argv + 1);
    return cli_bad_sub(c, "gate", sub, "list approve edit reject");
}

/* --gate SPEC, --gate-timeout S, --gate-on-expiry approve|reject into
 * *policy (made on first use): 2 when a and v were taken, 0 when a is not
 * one of them, -code (err set) on a bad value. */
static int gate_arg(cJSON **policy, const char *a, const char *v,
                    struct fo_err *err)
{
    int gate = !strcmp(a, "--gate"), tmo = !strcmp(a, "--gate-timeout"),
        exp = !strcmp(a, "--gate-on-expiry");
    if (!gate && !tmo && !exp)
        return 0;
    if (!v)
        return -fo_err_set(err, FO_E_USAGE, "%s needs a value", a);
    if (!*policy && !(*policy = cJSON_CreateObject()))
        return -fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = FO_OK;
    if (gate) {
        rc = orch_gate_flag(*policy, v, err);
    } else if (tmo) {
        long long s = cli_parse_seq(v);
        if (s < 1 || s > ORCH_GATE_TIMEOUT_MAX_S)
            rc = fo_err_set(err, FO_E_USAGE, "--gate-timeout: seconds in 1..%d",
                            ORCH_GATE_TIMEOUT_MAX_S);
        else {
            cJSON_DeleteItemFromObjectCaseSensitive(*policy, "timeout_s");
            fo_json_add_int(*policy, "timeout_s", s);
        }
    } else if (strcmp(v, "approve") != 0 && strcmp(v, "reject") != 0) {
        rc = fo_err_set(err, FO_E_USAGE, "--gate-on-expiry: approve or reject");
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(*policy, "on_expiry");
        cJSON_AddStringToObject(*policy, "on_expiry", v);
    }
    return rc ? -rc : 2;
}

int cli_gate_call(struct cli *c, const char *cmd, const char *flag,
                  const char *v, void *policy)
{
    struct fo_err err;
    fo_err_clear(&err);
    if (gate_arg(policy, flag, v, &err) < 0)
        return cli_usage_error(c, "%s: %s", cmd, err.msg);
    return 0;
}
