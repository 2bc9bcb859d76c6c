/* cli_session: `forum session list|show|fork|remember|forget`:
 * sessions read and written on the ledger in this process (like `ledger
 * append`, no daemon needed). */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <stdio.h>
#include <string.h>

#include "daemon/orch.h"
#include "ledger/fo_json.h"

static const char session_usage[] =
    "usage: forum session list [--json]\n"
    "       forum session show SESSION [--json]\n"
    "       forum session fork SESSION --at RUN --into NEW [--json]\n"
    "       forum session remember SESSION KEY VALUE [--json]\n"
    "       forum session forget SESSION KEY [--json]\n"
    "A session is a chain of turns: runs started with --session NAME\n"
    "(submit, run start, or \"session\" in a request) see the session's\n"
    "earlier turns and its facts as context, within a token budget\n"
    "(--max-total-tokens and the others; the context_preflight method,\n"
    "POST /context/preflight or the MCP tool, shows what a request would\n"
    "send). A session is only ledger entries: it\n"
    "survives restarts and verifies like the rest.\n"
    "  fork      a new session that starts from SESSION as it stood at its\n"
    "            turn RUN (that turn and those before it)\n"
    "  remember  keep a fact; later turns see it\n"
    "  forget    the fact's text is redacted (none of it is left) and a\n"
    "            fact_forgotten entry records the key\n"
    "examples:\n"
    "  forum submit --session api \"design the login endpoint\"\n"
    "  forum session remember api language C11\n"
    "  forum session show api\n"
    "exit codes: 0 ok; 1 no such session or fact; 2 usage or bad input; 3 "
    "I/O\n";

static int run_method(struct cli *c, const char *method, cJSON *in, int rw)
{
    struct ledger *l = NULL;
    int ex = cli_open(c, rw ? LEDGER_OPEN_CREATE : LEDGER_OPEN_READONLY, &l);
    if (ex) {
        cJSON_Delete(in);
        return ex;
    }
    cJSON *out = NULL;
    ex = cli_call(c, l, method, in, &out);
    ledger_close(l);
    if (ex)
        return ex;
    if (c->json) {
        cli_print_json(out, 0);
    } else if (!strcmp(method, "session_list")) {
        const cJSON *t;
        cJSON_ArrayForEach (t,
                            cJSON_GetObjectItemCaseSensitive(out, "sessions"))
            printf("%s\t%lld turns\t(started at seq %lld)\n",
                   cli_str_or(t, "session", "?"), cli_int_or(t, "turns", 0),
                   cli_int_or(t, "started_seq", 0));
        if (!cJSON_GetArraySize(
                cJSON_GetObjectItemCaseSensitive(out, "sessions")))
            printf("no sessions\n");
    } else if (!strcmp(method, "session_remember")) {
        printf("session %s: remembered %s (fact seq %lld)\n",
               cli_str_or(out, "session", "?"), cli_str_or(out, "key", "?"),
               cli_int_or(out, "seq", 0));
    } else if (!strcmp(method, "session_forget")) {
        printf("session %s: forgot %s (fact seq %lld redacted; seq %lld "
               "records it)\n",
               cli_str_or(out, "session", "?"), cli_str_or(out, "key", "?"),
               cli_int_or(out, "fact_seq", 0), cli_int_or(out, "seq", 0));
    } else if (!strcmp(method, "session_fork")) {
        printf(
            "session %s: forked from %s at run %lld (started at seq %lld, "
            "%d turns)\n",
            cli_str_or(out, "session", "?"),
            cli_str_or(out, "forked_from", "?"), cli_int_or(out, "at", 0),
            cli_int_or(out, "started_seq", 0),
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(out, "turns")));
    } else {
        const cJSON *t;
        printf("session %s (started at seq %lld)\n",
               cJSON_GetObjectItemCaseSensitive(out, "session")->valuestring,
               (long long)cJSON_GetObjectItemCaseSensitive(out, "started_seq")
                   ->valuedouble);
        cJSON_ArrayForEach (t, cJSON_GetObjectItemCaseSensitive(out, "turns")) {
            const cJSON *rq = cJSON_GetObjectItemCaseSensitive(t, "request");
            const cJSON *an = cJSON_GetObjectItemCaseSensitive(t, "answer");
            printf("turn %lld (run %lld, %s)\n  request: %.200s\n  answer: "
                   "%.200s\n",
                   (long long)cJSON_GetObjectItemCaseSensitive(t, "turn")
                       ->valuedouble,
                   (long long)cJSON_GetObjectItemCaseSensitive(t, "run")
                       ->valuedouble,
                   cJSON_GetObjectItemCaseSensitive(t, "state")->valuestring,
                   cJSON_IsString(rq) ? rq->valuestring : "(redacted)",
                   cJSON_IsString(an) ? an->valuestring : "(none)");
        }
        const cJSON *f;
        cJSON_ArrayForEach (f, cJSON_GetObjectItemCaseSensitive(out, "facts"))
            printf("fact %s: %s\n", f->string, f->valuestring);
    }
    cJSON_Delete(out);
    return 0;
}

int cli_session(struct cli *c, int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i]))
            return cli_help(session_usage);
    if (argc < 2)
        return cli_usage_error(c, "session: list, show, fork, remember or "
                                  "forget");
    const char *sub = argv[1];
    static const char *const subs[] = {"list", "show", "fork", "remember",
                                       "forget"};
    size_t k = 0;
    while (k < 5 && strcmp(sub, subs[k]))
        k++;
    if (k == 5)
        return cli_bad_sub(c, "session", sub, "list show fork remember forget");
    /* options: fork's --at and --into, no others; remember's VALUE is free
     * text, so the parse stops before it */
    long long at = -1;
    const char *into = NULL, *pos[8];
    int npos = 0;
    const struct cli_opt fork_opts[] = {
        {"--at", "RUN", CLI_OPT_INT, &at, 0, INT64_MAX, NULL, "not a run",
         "the turn the new session starts from"},
        {"--into", "NEW", CLI_OPT_STR, &into, 0, 0, NULL, NULL,
         "the new session's name"},
        CLI_OPT_END,
    };
    char name[32];
    snprintf(name, sizeof(name), "session %s", sub);
    int parsed = k == 3 && argc > 4 ? 3 : argc - 1;
    int ex = cli_parse(c, name, parsed, argv + 1,
                       k == 2 ? fork_opts : fork_opts + 2, pos, 8, &npos);
    if (ex)
        return ex == CLI_PARSE_HELP ? cli_help(session_usage) : ex;
    for (int i = parsed + 1; i < argc && npos < 8; i++)
        pos[npos++] = argv[i];
    cJSON *in = cJSON_CreateObject();
    if (!in)
        return 3;
    if (k == 0 && npos == 0)
        return run_method(c, "session_list", in, 0);
    if (npos < 1) {
        cJSON_Delete(in);
        return cli_usage_error(c, "session %s: SESSION is required", sub);
    }
    cJSON_AddStringToObject(in, "session", pos[0]);
    if (k == 1 && npos == 1)
        return run_method(c, "session_show", in, 0);
    if (k == 3 && npos == 3 && argc == 5) {
        cJSON_AddStringToObject(in, "key", pos[1]);
        cJSON_AddStringToObject(in, "value", pos[2]);
        return run_method(c, "session_remember", in, 1);
    }
    if (k == 4 && npos == 2) {
        cJSON_AddStringToObject(in, "key", pos[1]);
        return run_method(c, "session_forget", in, 1);
    }
    if (k == 2 && npos == 1) {
        if (at < 0 || !into) {
            cJSON_Delete(in);
            return cli_usage_error(c, "session fork: --at RUN --into NEW");
        }
        fo_json_add_int(in, "at", at);
        cJSON_AddStringToObject(in, "into", into);
        return run_method(c, "session_fork", in, 1);
    }
    cJSON_Delete(in);
    return cli_usage_error(c,
                           "session: %s: see forum session --help for the "
                           "arguments",
                           sub);
}

/* --session NAME, --max-{total,request,history,facts,tool-results}-tokens
 * N and --compaction drop|summary (CLI_SESSION_OPTS, cli_opt.h) into
 * *session and *context (made on first use): 2 when taken, 0 when a is
 * none of them, -code (err set) on a bad value. */
static int session_arg(const char **session, cJSON **context, const char *a,
                       const char *v, struct fo_err *err)
{
    static const char *const lims[] = {
        "--max-total-tokens", "--max-request-tokens", "--max-history-tokens",
        "--max-facts-tokens", "--max-tool-results-tokens"};
    if (!strcmp(a, "--session")) {
        if (!v)
            return -fo_err_set(err, FO_E_USAGE, "--session needs a name");
        *session = v;
        return 2;
    }
    if (!strcmp(a, "--compaction")) {
        if (!v || (strcmp(v, "drop") && strcmp(v, "summary")))
            return -fo_err_set(err, FO_E_USAGE,
                               "--compaction: drop or summary");
        if (!*context && !(*context = cJSON_CreateObject()))
            return -fo_err_set(err, FO_E_NOMEM, NULL);
        cJSON_DeleteItemFromObjectCaseSensitive(*context, "compaction");
        if (!cJSON_AddStringToObject(*context, "compaction", v))
            return -fo_err_set(err, FO_E_NOMEM, NULL);
        return 2;
    }
    for (size_t i = 0; i < sizeof(lims) / sizeof(lims[0]); i++)
        if (!strcmp(a, lims[i])) {
            long long n = v ? cli_parse_seq(v) : -1;
            if (n < 0 || n > ORCH_CTX_TOKENS_MAX)
                return -fo_err_set(err, FO_E_USAGE, "%s: tokens 0..%d", a,
                                   ORCH_CTX_TOKENS_MAX);
            if (!*context && !(*context = cJSON_CreateObject()))
                return -fo_err_set(err, FO_E_NOMEM, NULL);
            char key[32];
            snprintf(key, sizeof(key), "%s", a + 2);
            for (char *p = key; *p; p++)
                if (*p == '-')
                    *p = '_';
            cJSON_DeleteItemFromObjectCaseSensitive(*context, key);
            fo_json_add_int(*context, key, n);
            return 2;
        }
    return 0;
}

int cli_session_call(struct cli *c, const char *cmd, const char *flag,
                     const char *v, void *session_opts)
{
    struct cli_session_opts *s = session_opts;
    struct fo_err err;
    fo_err_clear(&err);
    if (session_arg(&s->session, &s->context, flag, v, &err) < 0)
        return cli_usage_error(c, "%s: %s", cmd, err.msg);
    return 0;
}
