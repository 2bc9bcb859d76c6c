/* cli_run: `forum run start|get|cancel|wait`: background runs from a shell.
 * start and cancel talk to the daemon of the data dir over HTTP (a run
 * belongs to the process that runs it); get and wait call run_get here, on
 * the ledger, since it answers in any process. */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/orch.h"
#include "daemon/service.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"

#define RUN_HTTP_TIMEOUT_MS                                                    \
    30000 /* run_start and run_cancel answer at once                           \
           */
#define RUN_ID_MAX ((1LL << 53) - 1) /* ids travel as JSON numbers */
#define RUN_WAIT_MAX_S 1000000
#define RUN_POLL_FIRST_MS 50
#define RUN_POLL_MAX_MS 500

static const char help_run[] =
    "usage: forum [--ledger DIR] run <command> [options]\n"
    "\n"
    "Background runs: a request answered end to end (as `forum submit`)\n"
    "by the daemon serving the data dir, while you do something else.\n"
    "\n"
    "commands:\n"
    "  start REQUEST...   start a run in the running daemon; prints its id\n"
    "  get ID             the run's state, request, entries, answer or error\n"
    "  cancel ID          stop a run of the daemon at its next step\n"
    "  wait ID [--timeout S]\n"
    "                     wait until the run ends, then print it as get\n"
    "\n"
    "start and cancel need the daemon (`forum serve start`): they use the\n"
    "address in DIR/forum.state.json and the token in DIR/token. get and\n"
    "wait read the ledger and need no daemon. A run's id is the seq of its\n"
    "request entry (`forum submit` runs have ids too).\n"
    "\n"
    "options for every command: --json (print the method's result object:\n"
    "what POST /runs, GET /runs/{id} and POST /runs/{id}/cancel serve),\n"
    "--help\n"
    "exit codes: 0 ok; 1 not found (no daemon, no such run, not a run, a\n"
    "run of another process) and, for wait, a run that ended other than\n"
    "done; 2 usage or bad input; 3 I/O or storage error, and wait's\n"
    "--timeout (code timeout)\n";

static const char help_start[] =
    "usage: forum run start REQUEST... [--max-model-calls N]\n"
    "                       [--max-seconds S] [--json]\n"
    "Starts a run of REQUEST (the words joined with spaces) in the daemon\n"
    "serving the data dir (POST /runs) and prints its id at once; the run\n"
    "goes on in the daemon. Follow it with `forum run get ID` or\n"
    "`forum run wait ID`.\n"
    "The daemon's configuration decides how the run is answered: its model\n"
    "providers, --cmd, roster and --max-runs (`forum serve` flags or\n"
    "DIR/forum.json). So the provider flags of `forum submit` (--chat-url,\n"
    "--api, --tier, --model, --api-key-env), --cmd, --roster and --timeout\n"
    "are refused here (exit 2): give them to `forum serve`, or use\n"
    "`forum submit` to run a request in this process with them.\n"
    "options:\n"
    "  --max-model-calls N  the run's model calls (1..1000; default 32)\n"
    "  --max-seconds S      the run's wall-clock budget "
    "(1..86400)\n" CLI_GATE_HELP CLI_SESSION_HELP
    "  --json               print {run, state} as POST /runs does\n"
    "exit codes: 0 started; 1 no daemon is running on the data dir (start\n"
    "one with `forum serve start`); 2 usage, or the daemon refused the\n"
    "input or the token; 3 the daemon cannot be reached, is busy (max_runs\n"
    "runs in progress: code busy) or draining, or failed\n"
    "examples:\n  forum run start \"add a login endpoint\" --max-model-calls "
    "20\n"
    "  forum run start \"refactor the parser\" --gate all\n";

static const char help_get[] =
    "usage: forum run get ID [--json]\n"
    "The state of run ID, read from the ledger (run_get: needs no daemon):\n"
    "running, done, budget (its budget was spent), stopped (the daemon shut\n"
    "down), cancelled, failed, interrupted (its process died) or unknown;\n"
    "its request, how many entries it wrote, its answer once it has one and\n"
    "its error when it failed.\n"
    "  --json   print the result object of GET /runs/{id}, entries included\n"
    "exit codes: 0 (whatever the state); 1 no entry ID (not_found) or an\n"
    "entry that is not a run's request (not_a_run); 2 usage; 3 I/O\n"
    "example:\n  forum run get 1234\n";

static const char help_cancel[] =
    "usage: forum run cancel ID [--json]\n"
    "Asks the daemon to cancel run ID (POST /runs/{id}/cancel): the run stops\n"
    "at its next step, witnessed (a budget entry with reason cancelled and a\n"
    "fixed answer), and then reads `cancelled`. A run that already ended\n"
    "keeps its state (cancel: ended).\n"
    "Only the process running a run can cancel it. With no daemon running\n"
    "the method is called here, so the answer is still the method's own: a\n"
    "run that ended gives its state; a run in progress in another process\n"
    "(`forum mcp`, `forum submit`) or of unknown state is run_elsewhere.\n"
    "  --json   print {run, state, cancel} as POST /runs/{id}/cancel does\n"
    "exit codes: 0 requested or already ended; 1 not_found, not_a_run or\n"
    "run_elsewhere; 2 usage; 3 I/O, or the daemon cannot be reached\n"
    "example:\n  forum run cancel 1234\n";

static const char help_wait[] =
    "usage: forum run wait ID [--timeout S] [--json]\n"
    "Polls run ID (run_get, on the ledger: needs no daemon) until it ends\n"
    "(its state is neither running nor waiting), then prints it as `forum\n"
    "run get` does. A run waiting at an approval gate has not ended: wait\n"
    "says so once on stderr, with the commands that decide it, and goes on\n"
    "waiting. On a terminal, stderr shows the entries written so far.\n"
    "  --timeout S   give up after S seconds (0 = look once; default: wait\n"
    "                as long as it takes)\n"
    "  --json        print the result object of GET /runs/{id}\n"
    "exit codes: 0 the run ended done (it has its answer); 1 it ended\n"
    "budget, stopped, cancelled, failed, interrupted or unknown (printed all\n"
    "the same; an answer, if any, is a fixed one), or ID is not found or not\n"
    "a run; 2 usage; 3 the timeout passed with the run still running or\n"
    "waiting at a gate (code timeout: nothing on stdout), or an I/O error\n"
    "example:\n  forum run wait 1234 --timeout 600\n";

/* ---- arguments ----------------------------------------------------------- */

/* The run id in s into *id; a usage error (exit 2) when not one. */
static int parse_id(struct cli *c, const char *cmd, const char *s,
                    long long *id)
{
    long long v = cli_parse_seq(s);
    if (v < 0 || v > RUN_ID_MAX)
        return cli_usage_error(c,
                               "run %s: ID \"%s\": not a non-negative "
                               "integer (the seq of a run's request)",
                               cmd, s);
    *id = v;
    return 0;
}

/* The flags `forum run start` refuses, as hidden switch rows of its table
 * (parsed, so the reason is given, but neither listed nor suggested): the
 * daemon's configuration decides them. */
static int daemon_flag(struct cli *c, const char *cmd, const char *flag,
                       const char *v, void *ctx)
{
    (void)v;
    (void)ctx;
    return cli_usage_error(
        c,
        "%s: %s: the daemon runs the request with its own "
        "configuration; give %s to `forum serve` (or DIR/forum.json), "
        "or use `forum submit` to run it in this process",
        cmd, flag, flag);
}

/* ---- the daemon ---------------------------------------------------------- */

/* The daemon serving c->ledger_dir: its address from forum.state.json and
 * its token. FO_E_NOT_FOUND when none is running (the message says how to
 * start one), FO_E_IO when one holds the dir but its state cannot be
 * read. */
int cli_daemon_find(struct cli *c, struct cli_daemon *d, struct fo_err *err)
{
    long pid = 0;
    int r = daemon_running(c->ledger_dir, &pid);
    if (r < 0)
        return fo_err_set(err, FO_E_IO, "%s/%s: cannot check for a daemon",
                          c->ledger_dir, DAEMON_PID_FILE);
    if (r == 0)
        return fo_err_set(err, FO_E_NOT_FOUND,
                          "no forum daemon is running on %s: start one with "
                          "`forum --ledger %s serve start`",
                          c->ledger_dir, c->ledger_dir);
    cJSON *st = cli_read_state(c);
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(st, "host");
    long long port = 0;
    int ok = cJSON_IsString(h) && h->valuestring[0] &&
             strlen(h->valuestring) < sizeof(d->host) &&
             fo_json_get_int(st, "port", 1, 65535, &port) == FO_OK;
    if (!ok) {
        cJSON_Delete(st);
        return fo_err_set(err, FO_E_IO,
                          "pid %ld holds %s but its %s cannot be read (is it "
                          "still starting?)",
                          pid, c->ledger_dir, DAEMON_STATE_FILE);
    }
    d->dir = c->ledger_dir;
    snprintf(d->host, sizeof(d->host), "%s", h->valuestring);
    d->port = (int)port;
    /* With auth off the token is not needed; with auth on (or unknown) a
     * token that cannot be read is the error to report. */
    int auth = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(st, "auth"));
    cJSON_Delete(st);
    struct fo_err terr;
    fo_err_clear(&terr);
    d->has_token = daemon_token(c->ledger_dir, 0, d->token, sizeof(d->token),
                                &terr) == FO_OK;
    if (!d->has_token && auth) {
        *err = terr;
        if (err->code == FO_E_NOT_FOUND)
            err->code = FO_E_IO;
        return err->code;
    }
    return FO_OK;
}

/* The code named name, as the daemon put it in an error body; for a name
 * this build does not know, a code of the HTTP status's class. */
static int code_of(const char *name, int status)
{
    for (int k = 1; k < FO_E__COUNT; k++)
        if (name && !strcmp(fo_code_name(k), name))
            return k;
    if (status == 404)
        return FO_E_NOT_FOUND;
    return status >= 400 && status < 500 ? FO_E_INVALID : FO_E_IO;
}

/* One method call to the daemon: method and path, body (NULL: none). On
 * FO_OK *out is the result object (the caller frees it); an error reply
 * becomes err with the daemon's code and message. */
int cli_daemon_call(const struct cli_daemon *d, const char *method,
                    const char *path, const char *body, cJSON **out,
                    struct fo_err *err)
{
    return cli_daemon_call_wait(d, method, path, body, RUN_HTTP_TIMEOUT_MS, out,
                                err);
}

int cli_daemon_call_wait(const struct cli_daemon *d, const char *method,
                         const char *path, const char *body, int timeout_ms,
                         cJSON **out, struct fo_err *err)
{
    int status = 0;
    char *reply = NULL;
    size_t len = 0;
    int rc = cli_http_request(
        d->host, d->port, method, path, d->has_token ? d->token : NULL, body,
        body ? strlen(body) : 0, timeout_ms, &status, &reply, &len, err);
    if (rc) {
        fo_err_prefix(err, "the daemon serving %s", d->dir);
        return rc;
    }
    cJSON *j = NULL;
    struct fo_err perr;
    if (fo_json_parse(reply, len, &j, &perr) != FO_OK || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        j = NULL;
    }
    if (status == 200 && j) {
        free(reply);
        *out = j;
        return FO_OK;
    }
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(j, "error");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(j, "code");
    if (status != 200 && cJSON_IsString(msg) && cJSON_IsString(code)) {
        rc = fo_err_set(err, code_of(code->valuestring, status), "%s",
                        msg->valuestring);
    } else {
        /* a transport-level reply of libevent's, or not JSON at all */
        size_t show = strcspn(reply, "\r\n");
        rc = fo_err_set(err, code_of(NULL, status == 200 ? 500 : status),
                        "the daemon answered HTTP %d: %.*s", status,
                        (int)(show > 120 ? 120 : show), reply);
    }
    cJSON_Delete(j);
    free(reply);
    return rc;
}

/* ---- output -------------------------------------------------------------- */

/* A run_get result: the object with --json, else one field a line. */
static void print_run(struct cli *c, const cJSON *g)
{
    if (c->json) {
        cli_print_json(g, 0);
        return;
    }
    printf("run: %lld\n", cli_int_or(g, "run", -1));
    printf("state: %s\n", cli_str_or(g, "state", "?"));
    const char *req = cli_str_or(g, "request", NULL);
    fputs("request: ", stdout);
    cli_tty_puts(stdout, req ? req : "(redacted)");
    putchar('\n');
    long long count = cli_int_or(g, "count", 0);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "truncated")))
        printf("entries: %lld (--json shows the last %d)\n", count,
               ORCH_RUN_ENTRIES_MAX);
    else
        printf("entries: %lld\n", count);
    const char *ans = cli_str_or(g, "answer", NULL);
    if (ans) {
        fputs("answer: ", stdout);
        cli_tty_puts(stdout, ans);
        putchar('\n');
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(g, "error");
    if (cJSON_IsObject(e)) {
        fputs("error: ", stdout);
        cli_tty_puts(stdout, cli_str_or(e, "error", "?"));
        printf(" (%s)\n", cli_str_or(e, "code", "?"));
    }
}

/* ---- the commands -------------------------------------------------------- */

static int cmd_start(struct cli *c, int argc, char **argv)
{
    struct fo_buf text, body;
    fo_buf_init(&text, ORCH_REQUEST_MAX);
    fo_buf_init(&body, FO_BUF_UNLIMITED);
    cJSON *in = NULL, *out = NULL, *gates = NULL;
    struct cli_session_opts s = {NULL, NULL};
    struct fo_err err;
    fo_err_clear(&err);
    long long calls = 0, secs = 0;
    struct cli_opt_call gate = {cli_gate_call, &gates},
                        sess = {cli_session_call, &s},
                        refuse = {daemon_flag, NULL};
    const struct cli_opt opts[] = {
        {"--max-model-calls", "N", CLI_OPT_INT, &calls, 1,
         ORCH_SUBMIT_CALLS_MAX, NULL, NULL, "the run's model calls"},
        {"--max-seconds", "S", CLI_OPT_INT, &secs, 1, ORCH_SUBMIT_SECONDS_MAX,
         NULL, NULL, "the run's wall-clock budget"},
        CLI_GATE_OPTS(&gate),
        CLI_SESSION_OPTS(&sess),
        /* the daemon's own: refused with the reason */
        {"--chat-url", NULL, CLI_OPT_CALL, &refuse, 0, 0, NULL, NULL, NULL},
        {"--api", NULL, CLI_OPT_CALL, &refuse, 0, 0, NULL, NULL, NULL},
        {"--tier", NULL, CLI_OPT_CALL, &refuse, 0, 0, NULL, NULL, NULL},
        {"--model", NULL, CLI_OPT_CALL, &refuse, 0, 0, NULL, NULL, NULL},
        {"--api-key-env", NULL, CLI_OPT_CALL, &refuse, 0, 0, NULL, NULL, NULL},
        {"--cmd", NULL, CLI_OPT_CALL, &refuse, 0, 0, NULL, NULL, NULL},
        {"--roster", NULL, CLI_OPT_CALL, &refuse, 0, 0, NULL, NULL, NULL},
        {"--timeout", NULL, CLI_OPT_CALL, &refuse, 0, 0, NULL, NULL, NULL},
        CLI_OPT_END,
    };
    const char **words = calloc((size_t)argc + 1, sizeof(*words));
    int nw = 0, code = 0;
    if (!words) {
        code = cli_fail(c, &(struct fo_err){FO_E_NOMEM, "out of memory"});
        goto out;
    }
    code = cli_parse(c, "run start", argc, argv, opts, words, argc, &nw);
    for (int i = 0; !code && i < nw; i++)
        if ((i && fo_buf_putc(&text, ' ')) || fo_buf_puts(&text, words[i]))
            code = cli_usage_error(c, "run start: request over %u bytes",
                                   ORCH_REQUEST_MAX);
    free(words);
    if (code == CLI_PARSE_HELP) {
        code = cli_help(help_start);
        goto out;
    }
    if (code)
        goto out;
    if (!nw) {
        code = cli_usage_error(c, "run start: no REQUEST");
        goto out;
    }
    struct cli_daemon d;
    if (cli_daemon_find(c, &d, &err) != FO_OK) {
        code = cli_fail(c, &err);
        goto out;
    }
    in = cJSON_CreateObject();
    if (!in || !cJSON_AddStringToObject(in, "request", text.data) ||
        (calls && !fo_json_add_int(in, "max_model_calls", calls)) ||
        (secs && !fo_json_add_int(in, "max_seconds", secs)) ||
        (gates &&
         !cJSON_AddItemToObject(in, "gates", cJSON_Duplicate(gates, 1))) ||
        (s.session && !cJSON_AddStringToObject(in, "session", s.session)) ||
        (s.context && !cJSON_AddItemToObject(in, "context",
                                             cJSON_Duplicate(s.context, 1)))) {
        code = cli_fail(c, &(struct fo_err){FO_E_NOMEM, "out of memory"});
        goto out;
    }
    if (fo_json_canon(in, &body, &err) != FO_OK) {
        code = cli_fail(c, &err);
        goto out;
    }
    if (cli_daemon_call(&d, "POST", "/runs", body.data, &out, &err) != FO_OK) {
        code = cli_fail(c, &err);
        goto out;
    }
    if (c->json) {
        cli_print_json(out, 0);
    } else {
        long long run = cli_int_or(out, "run", -1);
        printf("%lld\n", run);
        if (isatty(2))
            fprintf(stderr,
                    "forum: run %lld started; follow it with `forum run "
                    "wait %lld`\n",
                    run, run);
    }
out:
    cJSON_Delete(gates);
    cJSON_Delete(s.context);
    cJSON_Delete(in);
    cJSON_Delete(out);
    fo_buf_release(&text);
    fo_buf_release(&body);
    return code;
}

/* Parses `ID [--timeout S]` (timeout only when *timeout is not NULL): 0,
 * or -1 after printing help, or the usage exit code. */
static int parse_id_args(struct cli *c, const char *cmd, const char *help,
                         int argc, char **argv, long long *id,
                         long long *timeout)
{
    const struct cli_opt opts[] = {
        {"--timeout", "S", CLI_OPT_INT, timeout, 0, RUN_WAIT_MAX_S, NULL, NULL,
         "give up after S seconds (exit 3)"},
        CLI_OPT_END,
    };
    char name[32];
    snprintf(name, sizeof(name), "run %s", cmd);
    const char *pos[8];
    int npos = 0;
    int ex = cli_parse(c, name, argc, argv, timeout ? opts : opts + 1, pos, 8,
                       &npos);
    if (ex == CLI_PARSE_HELP)
        return cli_help(help) - 1;
    if (ex)
        return ex;
    if (npos > 1)
        return cli_usage_error(c, "run %s: one ID only (got %s too)", cmd,
                               pos[1]);
    if (!npos)
        return cli_usage_error(c, "run %s: no ID", cmd);
    return parse_id(c, cmd, pos[0], id);
}

/* A method of the handler table on {"run": id}, in this process: run_get
 * (any process can answer it) or run_cancel (here with no orchestrator:
 * the run cannot be ours). */
static int call_run(struct ledger *l, const char *method, long long id,
                    cJSON **out, struct fo_err *err)
{
    cJSON *in = cJSON_CreateObject();
    if (!in || !fo_json_add_int(in, "run", id)) {
        cJSON_Delete(in);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    return cli_call_err(l, method, in, out, err);
}

static int cmd_get(struct cli *c, int argc, char **argv)
{
    long long id = -1;
    int ex = parse_id_args(c, "get", help_get, argc, argv, &id, NULL);
    if (ex)
        return ex < 0 ? 0 : ex;
    struct ledger *l = NULL;
    ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (ex)
        return ex;
    cJSON *g = NULL;
    struct fo_err err;
    fo_err_clear(&err);
    int rc = call_run(l, "run_get", id, &g, &err);
    ledger_close(l);
    if (rc)
        return cli_fail(c, &err);
    print_run(c, g);
    cJSON_Delete(g);
    return 0;
}

static int cmd_cancel(struct cli *c, int argc, char **argv)
{
    long long id = -1;
    int ex = parse_id_args(c, "cancel", help_cancel, argc, argv, &id, NULL);
    if (ex)
        return ex < 0 ? 0 : ex;
    struct fo_err err;
    fo_err_clear(&err);
    struct cli_daemon d;
    cJSON *out = NULL;
    int rc = cli_daemon_find(c, &d, &err);
    if (rc == FO_OK) {
        char path[64];
        snprintf(path, sizeof(path), "/runs/%lld/cancel", id);
        if (cli_daemon_call(&d, "POST", path, NULL, &out, &err) != FO_OK)
            return cli_fail(c, &err);
    } else if (rc == FO_E_NOT_FOUND) {
        /* No daemon: nothing here runs the run, but the method still tells
         * a run that ended (its state) from one of another process or of
         * no known process (run_elsewhere) and from what is not a run. */
        struct ledger *l = NULL;
        ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
        if (ex)
            return ex;
        fo_err_clear(&err);
        rc = call_run(l, "run_cancel", id, &out, &err);
        ledger_close(l);
        if (rc)
            return cli_fail(c, &err);
    } else {
        return cli_fail(c, &err);
    }
    if (c->json) {
        cli_print_json(out, 0);
    } else if (!strcmp(cli_str_or(out, "cancel", ""), "requested")) {
        printf("run %lld: cancel requested; it stops at its next step\n", id);
    } else {
        printf("run %lld: already ended: %s\n", id,
               cli_str_or(out, "state", "?"));
    }
    cJSON_Delete(out);
    return 0;
}

/* What a running run is doing, from its latest entry: the step under way
 * after that entry was written. */
static const char *step_after(const char *kind)
{
    static const struct {
        const char *kind, *step;
    } steps[] = {
        {"request", "routing"},
        {"route", "planning"},
        {"coordinator_attempt", "planning (the coordinator again)"},
        {"plan", "starting the tasks"},
        {"task", "a task is working"},
        {"tool_call", "a tool is running"},
        {"tool_result", "the model reads a tool's result"},
        {"tool_rescue", "the model retries a tool call"},
        {"result", "validating a result"},
        {"validator_attempt", "validating (again)"},
        {"verdict", "the next task or the answer"},
        {"tier_escalation", "retrying on a stronger tier"},
        {"gate_requested", "waiting at a gate for a human (forum gate list)"},
        {"gate_approved", "resuming after a gate"},
        {"gate_edited", "resuming after a gate"},
        {"resume", "resuming"},
        {"guardrail", "a guardrail checked a step"},
        {"skip", "the next task"},
        {"context_budget", "fitting the context into its budget"},
    };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        if (!strcmp(steps[i].kind, kind))
            return steps[i].step;
    return "working";
}

struct latest {
    struct ledger_entry e;
    int64_t n;
};

static int latest_entry(void *ctx, const struct ledger_entry *e)
{
    struct latest *x = ctx;
    x->e = *e;
    x->n++;
    return 0;
}

static int cmd_wait(struct cli *c, int argc, char **argv)
{
    long long id = -1, timeout = -1;
    int ex = parse_id_args(c, "wait", help_wait, argc, argv, &id, &timeout);
    if (ex)
        return ex < 0 ? 0 : ex;
    struct ledger *l = NULL;
    ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (ex)
        return ex;
    int tty = isatty(2), shown = 0;
    int64_t t0 = ledger_mono_us() / 1000;
    int64_t deadline = timeout >= 0 ? t0 + timeout * 1000 : INT64_MAX;
    int pause = RUN_POLL_FIRST_MS;
    cJSON *g = NULL;
    struct fo_err err;
    fo_err_clear(&err);
    int rc, told_gate = 0;
    for (;;) {
        rc = call_run(l, "run_get", id, &g, &err);
        const char *st = rc ? "" : cli_str_or(g, "state", "");
        /* a run at a gate has not ended: wait for the decision and the
         * rest, saying once (also off a terminal) what it waits for */
        int gated = !strcmp(st, "waiting");
        if (rc || (strcmp(st, "running") != 0 && !gated))
            break;
        if (gated && !told_gate++)
            fprintf(stderr,
                    "%sforum: run %lld: waiting at a gate for a human "
                    "decision (forum gate list --run %lld; forum gate "
                    "approve|reject %lld WAVE)\n",
                    shown ? "\r\033[K" : "", id, id, id);
        int64_t now = ledger_mono_us() / 1000;
        if (now >= deadline) {
            rc = fo_err_set(&err, FO_E_TIMEOUT,
                            "run %lld: still %s after %lld s "
                            "(entries so far: %lld)",
                            id, gated ? "waiting at a gate" : "running",
                            timeout, cli_int_or(g, "count", 0));
            break;
        }
        if (tty) {
            struct latest x = {.n = 0};
            struct fo_err e2;
            if (ledger_descendants(l, id, -1, latest_entry, &x, &e2) == FO_OK &&
                x.n > 0)
                fprintf(stderr,
                        "\rforum: run %lld: %s (last: %s by %s, seq %lld), "
                        "%lld entries, %lld s\033[K",
                        id, step_after(x.e.kind), x.e.kind, x.e.actor,
                        (long long)x.e.seq, (long long)x.n,
                        (long long)(now - t0) / 1000);
            else
                fprintf(stderr,
                        "\rforum: run %lld: running, entries: %lld, %lld "
                        "s\033[K",
                        id, cli_int_or(g, "count", 0),
                        (long long)(now - t0) / 1000);
            shown = 1;
        }
        cJSON_Delete(g);
        g = NULL;
        int64_t nap = deadline - now < pause ? deadline - now : pause;
        usleep((useconds_t)nap * 1000);
        pause = pause * 2 > RUN_POLL_MAX_MS ? RUN_POLL_MAX_MS : pause * 2;
    }
    ledger_close(l);
    if (shown)
        fputs("\r\033[K", stderr); /* the progress line goes */
    if (rc) {
        cJSON_Delete(g);
        return cli_fail(c, &err);
    }
    print_run(c, g);
    const char *state = cli_str_or(g, "state", "?");
    int done = !strcmp(state, "done");
    if (!done)
        fprintf(stderr, "forum: run %lld ended %s, not done\n", id, state);
    cJSON_Delete(g);
    return done ? 0 : 1;
}

/* One line of text a client chose (a session's name, a model), with
 * terminal controls made harmless. */
static void tty_line(const char *s)
{
    cli_tty_puts(stdout, s);
    putchar('\n');
}

/* A gateway session's row of `forum run list`. */
static void print_gw_row(const cJSON *x, const char *when)
{
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(x, "tokens");
    char models[128] = "";
    size_t n = 0;
    const cJSON *m;
    cJSON_ArrayForEach (m, cJSON_GetObjectItemCaseSensitive(x, "models"))
        if (cJSON_IsString(m) && n < sizeof(models))
            n += (size_t)snprintf(models + n, sizeof(models) - n, "%s%s",
                                  n ? "," : "", m->valuestring);
    char line[512];
    snprintf(
        line, sizeof(line),
        "%-8s %-12s %-19s %7lld  %lld call%s, %lld error%s, tokens %lld "
        "in %lld out; %s",
        cli_str_or(x, "id", "?"), "gateway", when, cli_int_or(x, "entries", 0),
        cli_int_or(x, "calls", 0), cli_int_or(x, "calls", 0) == 1 ? "" : "s",
        cli_int_or(x, "errors", 0), cli_int_or(x, "errors", 0) == 1 ? "" : "s",
        cli_int_or(tk, "input", 0), cli_int_or(tk, "output", 0),
        models[0] ? models : "no model");
    tty_line(line);
}

/* `forum run list [--state S] [--limit N] [--before ID]`: a table for
 * people, the method's object with --json. */
static int cmd_list(struct cli *c, int argc, char **argv)
{
    const char *state = NULL, *type = NULL;
    long long limit = -1, before = -1;
    const struct cli_opt opts[] = {
        {"--state", "S", CLI_OPT_STR, &state, 0, 0, NULL, NULL,
         "only the runs in state S"},
        {"--type", "T", CLI_OPT_STR, &type, 0, 0, NULL, NULL,
         "only runs (run) or only gateway sessions (gateway_session)"},
        {"--limit", "N", CLI_OPT_INT, &limit, 0, INT64_MAX, NULL,
         "not a number", "at most N runs"},
        {"--before", "ID", CLI_OPT_INT, &before, 0, INT64_MAX, NULL,
         "not a number", "the runs before run ID"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "run list", argc, argv, opts, NULL, 0, NULL);
    if (pe == CLI_PARSE_HELP)
        return cli_help(
            "usage: forum run list [--state S] [--type T] [--limit N] "
            "[--before ID] [--json]\n"
            "The runs of the ledger and the model gateway's sessions, newest "
            "first (run_list, GET /runs): id, state, when it started, "
            "entries, the request; a gateway session as session:NAME with "
            "its calls, errors, tokens and models (forum run show "
            "session:NAME lists its calls).\n"
            "example:\n  forum run list --state waiting\n"
            "  forum run list --type gateway_session\n");
    if (pe)
        return pe;
    cJSON *in = cJSON_CreateObject();
    if (!in || (state && !cJSON_AddStringToObject(in, "state", state)) ||
        (type && !cJSON_AddStringToObject(in, "type", type)) ||
        (limit >= 0 && !fo_json_add_int(in, "limit", limit)) ||
        (before >= 0 && !fo_json_add_int(in, "before", before))) {
        cJSON_Delete(in);
        return 3;
    }
    struct ledger *l = NULL;
    int ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (ex) {
        cJSON_Delete(in);
        return ex;
    }
    cJSON *out = NULL;
    ex = cli_call(c, l, "run_list", in, &out);
    ledger_close(l);
    if (ex)
        return ex;
    if (c->json) {
        cli_print_json(out, 0);
    } else {
        printf("%-8s %-12s %-19s %7s  %s\n", "RUN", "STATE", "STARTED",
               "ENTRIES", "REQUEST");
        const cJSON *x;
        cJSON_ArrayForEach (x, cJSON_GetObjectItemCaseSensitive(out, "runs")) {
            char when[32] = "?";
            time_t t = (time_t)(cli_int_or(x, "started_ts", 0) / 1000000);
            struct tm tm;
            if (localtime_r(&t, &tm))
                strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
            if (!strcmp(cli_str_or(x, "type", "run"), "gateway_session")) {
                print_gw_row(x, when);
                continue;
            }
            const char *req = cli_str_or(x, "request", "(redacted)");
            printf("%-8lld %-12s %-19s %7lld  %.60s%s\n",
                   cli_int_or(x, "run", -1), cli_str_or(x, "state", "?"), when,
                   cli_int_or(x, "entries", 0), req,
                   strlen(req) > 60 ? "..." : "");
        }
        const cJSON *nx = cJSON_GetObjectItemCaseSensitive(out, "next");
        if (cJSON_IsNumber(nx))
            printf("(more: --before %lld)\n", (long long)nx->valuedouble + 1);
    }
    cJSON_Delete(out);
    return 0;
}

/* method with in (taken) on the ledger, read-only: 0 and *out, or the exit
 * code; with --json the result is printed here and *out is NULL. */
static int show_call(struct cli *c, const char *method, cJSON *in, cJSON **out)
{
    struct ledger *l = NULL;
    int ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (ex) {
        cJSON_Delete(in);
        return ex;
    }
    ex = cli_call(c, l, method, in, out);
    ledger_close(l);
    if (ex)
        return ex;
    if (c->json) {
        cli_print_json(*out, 0);
        cJSON_Delete(*out);
        *out = NULL;
    }
    return 0;
}

/* `forum run show session:NAME`: a gateway session, call by call. */
static int show_gw(struct cli *c, const char *name)
{
    if (!*name)
        return cli_usage_error(c, "run show: session: needs a NAME");
    cJSON *in = cJSON_CreateObject(), *out = NULL;
    if (in)
        cJSON_AddStringToObject(in, "session", name);
    int ex = show_call(c, "gateway_session", in, &out);
    if (ex || !out)
        return ex;
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(out, "tokens");
    char line[512];
    snprintf(line, sizeof(line),
             "gateway session %s: %lld call%s, %lld error%s, tokens %lld in "
             "%lld out, %lld ms",
             name, cli_int_or(out, "calls", 0),
             cli_int_or(out, "calls", 0) == 1 ? "" : "s",
             cli_int_or(out, "errors", 0),
             cli_int_or(out, "errors", 0) == 1 ? "" : "s",
             cli_int_or(tk, "input", 0), cli_int_or(tk, "output", 0),
             cli_int_or(out, "duration_ms", 0));
    tty_line(line);
    printf("%-8s %-24s %6s %9s %13s  %s\n", "SEQ", "MODEL", "STATUS", "LATENCY",
           "TOKENS IN/OUT", "OUTCOME");
    const cJSON *x;
    cJSON_ArrayForEach (x, cJSON_GetObjectItemCaseSensitive(out, "steps")) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(x, "tokens");
        char tok[32];
        snprintf(tok, sizeof(tok), "%lld/%lld", cli_int_or(t, "input", 0),
                 cli_int_or(t, "output", 0));
        char lat[24];
        snprintf(lat, sizeof(lat), "%lld ms", cli_int_or(x, "duration_ms", 0));
        snprintf(line, sizeof(line), "%-8lld %-24.24s %6lld %9s %13s  %s",
                 cli_int_or(x, "seq", -1), cli_str_or(x, "model", "?"),
                 cli_int_or(x, "status", 0), lat, t ? tok : "-",
                 cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "ok"))
                     ? "ok"
                     : cli_str_or(x, "error_class", "failed"));
        tty_line(line);
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "truncated")))
        printf("(the first %d calls; forum ledger tail --kind gateway_call "
               "has them all)\n",
               ORCH_GW_STEPS_MAX);
    cJSON_Delete(out);
    return 0;
}

/* `forum run show ID`: the whole run, step by step. */
static int cmd_show(struct cli *c, int argc, char **argv)
{
    long long id = -1;
    int full = 0;
    const struct cli_opt opts[] = {
        {"--full", NULL, CLI_OPT_BOOL, &full, 0, 0, NULL, NULL,
         "every text whole, never cut"},
        CLI_OPT_END,
    };
    const char *pos[8];
    int npos = 0;
    int pe = cli_parse(c, "run show", argc, argv, opts, pos, 8, &npos);
    if (pe == CLI_PARSE_HELP)
        return cli_help(
            "usage: forum run show ID|session:NAME [--full] [--json]\n"
            "The whole run (run_show, GET /runs/{id}/show): its route, "
            "every step (each model call and tool call: when, how long, "
            "the tool's arguments and result in short), every task with "
            "its result and verdict, gates, budget and answer. A text cut "
            "to fit says so; --full prints every text whole. session:NAME "
            "shows a model gateway session instead (gateway_session, GET "
            "/gateway/sessions/{name}): each call in order with its model, "
            "status, latency and tokens.\n"
            "example:\n  forum run show 12\n  forum run show 12 --full\n"
            "  forum run show session:my-task-42\n");
    if (pe)
        return pe;
    if (npos == 1 && !strncmp(pos[0], "session:", 8))
        return show_gw(c, pos[0] + 8);
    if (npos > 1 || (npos && (id = cli_parse_seq(pos[0])) < 0))
        return cli_usage_error(c, "run show: one run ID or session:NAME");
    if (id < 0)
        return cli_usage_error(c, "run show: a run ID");
    cJSON *in = cJSON_CreateObject(), *out = NULL;
    if (in)
        fo_json_add_int(in, "run", id);
    int ex = show_call(c, "run_show", in, &out);
    if (ex || !out)
        return ex;
    cli_run_show_print(out, id, full);
    cJSON_Delete(out);
    return 0;
}

int cli_run(struct cli *c, int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error(
            c, "run: no command (start, get, cancel, wait, list or show)");
    const char *sub = argv[1];
    if (cli_is_help(sub) || !strcmp(sub, "help"))
        return cli_help(help_run);
    if (!strcmp(sub, "start"))
        return cmd_start(c, argc - 1, argv + 1);
    if (!strcmp(sub, "get"))
        return cmd_get(c, argc - 1, argv + 1);
    if (!strcmp(sub, "cancel"))
        return cmd_cancel(c, argc - 1, argv + 1);
    if (!strcmp(sub, "wait"))
        return cmd_wait(c, argc - 1, argv + 1);
    if (!strcmp(sub, "list"))
        return cmd_list(c, argc - 1, argv + 1);
    if (!strcmp(sub, "show"))
        return cmd_show(c, argc - 1, argv + 1);
    return cli_bad_sub(c, "run", sub, "start get cancel wait list show");
}
