/* cli_campaign: `forum campaign declare|list|status|next|run|ingest-status`
 * (daemon/orch_campaign.h). Each goes through the handler table: to the
 * daemon of the data dir over HTTP when one serves, else in this process;
 * `run` needs the daemon, which runs the features' runs. */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/orch_campaign.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"

#define CAMPAIGN_FILE_MAX ((1u << 20) - 4096) /* within the method's cap */

static const char campaign_usage[] =
    "usage: forum campaign declare FILE [--json]\n"
    "       forum campaign list [--limit N] [--json]\n"
    "       forum campaign status [ID] [--json]\n"
    "       forum campaign next [ID] [--json]\n"
    "       forum campaign run [ID] [--max-parallel N] [--poll-ms MS] "
    "[--json]\n"
    "       forum campaign ingest-status [ID] --project P [--feature F]\n"
    "                      --status done|in_progress|blocked|failed\n"
    "                      [--source S] [--reason R] [--json]\n"
    "A campaign is a feature DAG across projects, declared once (a\n"
    "campaign_declared entry; a cycle or an unknown dependency is refused\n"
    "before anything is written). Its state is reduced from the ledger each\n"
    "time: a feature is done, running or failed from its run, runnable when\n"
    "all it depends on is done. `run` starts each runnable feature as a\n"
    "durable run on the daemon (a campaign_dispatch entry names the run),\n"
    "waits, and goes on until nothing is runnable; run it again after a\n"
    "crash and it goes on where it stopped. `ingest-status` records what an\n"
    "outside project (owner external:NAME) reports. ID defaults to the\n"
    "latest declared campaign; --campaign-id ID works too.\n"
    "A run waiting at an approval gate is waited for; stopping `run` and\n"
    "running it again later is safe.\n"
    "`list` names the declared campaigns, the latest first.\n"
    "example:\n  forum campaign declare tests/ref/flagship_campaign.json\n"
    "  forum campaign list\n"
    "  forum campaign run flagship-uplift\n"
    "  forum campaign ingest-status flagship-uplift --project telos "
    "--feature telos-engine-showcase --status done\n";

/* Calls method (HTTP verb and path as the daemon serves it) with in
 * (consumed): on the daemon when one serves the data dir, else here. */
static int camp_call(struct cli *c, const char *method, const char *verb,
                     const char *path, cJSON *in, cJSON **out)
{
    struct fo_err err;
    fo_err_clear(&err);
    struct cli_daemon d;
    int rc = cli_daemon_find(c, &d, &err);
    if (rc == FO_OK) {
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        const char *id = cli_str_or(in, "campaign_id", NULL);
        if (!strcmp(verb, "GET"))
            rc = fo_buf_printf(&b, "%s%s%s", path, id ? "?campaign_id=" : "",
                               id ? id : "")
                     ? FO_E_NOMEM
                     : cli_daemon_call(&d, verb, b.data, NULL, out, &err);
        else if (!(rc = fo_json_canon(in, &b, &err)))
            rc = cli_daemon_call(&d, verb, path, b.data, out, &err);
        if (rc == FO_E_NOMEM)
            fo_err_set(&err, FO_E_NOMEM, "out of memory");
        fo_buf_release(&b);
        cJSON_Delete(in);
    } else if (rc == FO_E_NOT_FOUND) {
        struct ledger *l = NULL;
        int ex = cli_open(c, strcmp(verb, "GET") ? LEDGER_OPEN_CREATE : 0, &l);
        if (ex) {
            cJSON_Delete(in);
            return ex;
        }
        fo_err_clear(&err);
        rc = cli_call_err(l, method, in, out, &err);
        ledger_close(l);
    } else {
        cJSON_Delete(in);
    }
    return rc ? cli_fail(c, &err) : 0;
}

/* The campaign id: the positional or --campaign-id (not both). */
static int id_in(struct cli *c, const char *cmd, int npos, const char *pos,
                 const char *opt, cJSON **in)
{
    if (npos && opt && strcmp(pos, opt))
        return cli_usage_error(c, "%s: ID %s and --campaign-id %s differ", cmd,
                               pos, opt);
    const char *id = npos ? pos : opt;
    if (id && !orch_campaign_id_ok(id))
        return cli_usage_error(c, "%s: %s: an id is 1..%d of A-Za-z0-9._-", cmd,
                               id, ORCH_CAMPAIGN_ID_MAX);
    *in = cJSON_CreateObject();
    if (!*in || (id && !cJSON_AddStringToObject(*in, "campaign_id", id)))
        return cli_fail(c, &(struct fo_err){FO_E_NOMEM, "out of memory"});
    return 0;
}

static int declare(struct cli *c, int argc, char **argv)
{
    const char *pos[1], *file = NULL;
    int npos = 0;
    const struct cli_opt opts[] = {
        {"--file", "FILE", CLI_OPT_STR, &file, 0, 0, NULL, NULL,
         "the campaign file (as the positional FILE)"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "campaign declare", argc, argv, opts, pos, 1, &npos);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(campaign_usage) : pe;
    if (!npos && !file)
        return cli_usage_error(c, "campaign declare: FILE is required");
    struct fo_buf b;
    struct fo_err err;
    cJSON *camp = NULL, *out = NULL;
    if (cli_read_file(npos ? pos[0] : file, CAMPAIGN_FILE_MAX, &b, &err) ||
        fo_json_parse(b.data ? b.data : "", b.len, &camp, &err)) {
        fo_buf_release(&b);
        fo_err_prefix(&err, "%s", npos ? pos[0] : file);
        return cli_fail(c, &err);
    }
    fo_buf_release(&b);
    cJSON *in = cJSON_CreateObject();
    if (!in || !cJSON_AddItemToObject(in, "campaign", camp)) {
        cJSON_Delete(camp);
        cJSON_Delete(in);
        return cli_fail(c, &(struct fo_err){FO_E_NOMEM, "out of memory"});
    }
    int ex = camp_call(c, "campaign_declare", "POST", "/campaigns", in, &out);
    if (ex)
        return ex;
    if (c->json)
        cli_print_json(out, 0);
    else
        printf("campaign %s %s: seq %lld\n",
               cli_str_or(out, "campaign_id", "?"),
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "existing"))
                   ? "was declared already"
                   : "declared",
               cli_int_or(out, "seq", -1));
    cJSON_Delete(out);
    return 0;
}

static void print_list(const cJSON *out)
{
    const cJSON *k, *a = cJSON_GetObjectItemCaseSensitive(out, "campaigns");
    if (!cJSON_GetArraySize(a))
        printf("no campaign is declared\n");
    cJSON_ArrayForEach (k, a)
        printf("%-24s seq %-8lld %3lld features in %lld projects  %s\n",
               cli_str_or(k, "campaign_id", "?"),
               cli_int_or(k, "declared_seq", -1), cli_int_or(k, "features", 0),
               cli_int_or(k, "projects", 0), cli_str_or(k, "title", ""));
}

/* list: the declared campaigns, the latest first. */
static int list(struct cli *c, int argc, char **argv)
{
    long long limit = 100;
    const struct cli_opt opts[] = {
        {"--limit", "N", CLI_OPT_INT, &limit, 1, 1000, NULL, NULL,
         "at most N campaigns, the latest declared first (default 100)"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "campaign list", argc, argv, opts, NULL, 0, NULL);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(campaign_usage) : pe;
    char path[64];
    snprintf(path, sizeof(path), "/campaigns?limit=%lld", limit);
    cJSON *in = cJSON_CreateObject(), *out = NULL;
    if (!in || !fo_json_add_int(in, "limit", limit)) {
        cJSON_Delete(in);
        return cli_fail(c, &(struct fo_err){FO_E_NOMEM, "out of memory"});
    }
    int ex = camp_call(c, "campaign_list", "GET", path, in, &out);
    if (ex)
        return ex;
    if (c->json)
        cli_print_json(out, 0);
    else
        print_list(out);
    cJSON_Delete(out);
    return 0;
}

static void print_status(const cJSON *st)
{
    const cJSON *f, *n = cJSON_GetObjectItemCaseSensitive(st, "counts"), *k;
    printf("campaign %s: %s (declared at seq %lld)\n",
           cli_str_or(st, "campaign_id", "?"), cli_str_or(st, "title", ""),
           cli_int_or(st, "declared_seq", -1));
    printf("complete: %s\n",
           cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "complete"))
               ? "yes"
               : "no");
    cJSON_ArrayForEach (k, n)
        if (cJSON_IsNumber(k) && k->valuedouble > 0)
            printf("  %s: %lld\n", k->string, (long long)k->valuedouble);
    cJSON_ArrayForEach (f, cJSON_GetObjectItemCaseSensitive(st, "features")) {
        printf("%-10s %s (%s)", cli_str_or(f, "state", "?"),
               cli_str_or(f, "feature_id", "?"),
               cli_str_or(f, "project_id", "?"));
        if (cli_int_or(f, "run", -1) >= 0)
            printf(" run %lld", cli_int_or(f, "run", -1));
        printf("\n");
    }
}

/* status and next: [ID] [--campaign-id ID]. */
static int view(struct cli *c, int argc, char **argv, int next)
{
    const char *pos[1], *id = NULL;
    int npos = 0;
    const struct cli_opt opts[] = {
        {"--campaign-id", "ID", CLI_OPT_STR, &id, 0, 0, NULL, NULL,
         "the campaign (as the positional ID; default: the latest)"},
        CLI_OPT_END,
    };
    const char *cmd = next ? "campaign next" : "campaign status";
    int pe = cli_parse(c, cmd, argc, argv, opts, pos, 1, &npos);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(campaign_usage) : pe;
    cJSON *in = NULL, *out = NULL;
    int ex = id_in(c, cmd, npos, pos[0], id, &in);
    if (!ex)
        ex =
            camp_call(c, next ? "campaign_next" : "campaign_status", "GET",
                      next ? "/campaigns/next" : "/campaigns/status", in, &out);
    if (ex)
        return ex;
    if (c->json) {
        cli_print_json(out, 0);
    } else if (!next) {
        print_status(out);
    } else {
        static const char *const lists[] = {"runnable", "running",
                                            "unwitnessed", "blocked"};
        for (size_t i = 0; i < 4; i++) {
            const cJSON *f;
            printf("%s:", lists[i]);
            if (!cJSON_GetArraySize(
                    cJSON_GetObjectItemCaseSensitive(out, lists[i])))
                printf(" none");
            cJSON_ArrayForEach (f,
                                cJSON_GetObjectItemCaseSensitive(out, lists[i]))
                printf(" %s", cli_str_or(f, "feature_id", "?"));
            printf("\n");
        }
    }
    cJSON_Delete(out);
    return 0;
}

static int ingest(struct cli *c, int argc, char **argv)
{
    const char *pos[1], *id = NULL, *project = NULL, *feature = NULL;
    const char *status = NULL, *source = NULL, *reason = NULL;
    int npos = 0;
    const struct cli_opt opts[] = {
        {"--campaign-id", "ID", CLI_OPT_STR, &id, 0, 0, NULL, NULL,
         "the campaign (as the positional ID; default: the latest)"},
        {"--project", "P", CLI_OPT_STR, &project, 0, 0, NULL, NULL,
         "the outside project reporting"},
        {"--feature", "F", CLI_OPT_STR, &feature, 0, 0, NULL, NULL,
         "one of its features (omit: the project's own state)"},
        {"--status", "S", CLI_OPT_STR, &status, 0, 0, NULL, NULL,
         "done, in_progress, blocked or failed"},
        {"--source", "S", CLI_OPT_STR, &source, 0, 0, NULL, NULL,
         "who reports it (default: the project's owner)"},
        {"--reason", "R", CLI_OPT_STR, &reason, 0, 0, NULL, NULL,
         "why, in a line"},
        CLI_OPT_END,
    };
    const char *cmd = "campaign ingest-status";
    int pe = cli_parse(c, cmd, argc, argv, opts, pos, 1, &npos);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(campaign_usage) : pe;
    if (!project || !status)
        return cli_usage_error(c, "%s: --project and --status are required",
                               cmd);
    cJSON *in = NULL, *out = NULL;
    int ex = id_in(c, cmd, npos, pos[0], id, &in);
    if (ex)
        return ex;
    cJSON_AddStringToObject(in, "project_id", project);
    cJSON_AddStringToObject(in, "status", status);
    if (feature)
        cJSON_AddStringToObject(in, "feature_id", feature);
    if (source)
        cJSON_AddStringToObject(in, "source", source);
    if (reason)
        cJSON_AddStringToObject(in, "reason", reason);
    ex = camp_call(c, "campaign_ingest_status", "POST", "/campaigns/ingest", in,
                   &out);
    if (ex)
        return ex;
    if (c->json)
        cli_print_json(out, 0);
    else
        printf("%s seq %lld: %s %s\n", cli_str_or(out, "kind", "?"),
               cli_int_or(out, "seq", -1), feature ? feature : project, status);
    cJSON_Delete(out);
    return 0;
}

/* ---- run ----------------------------------------------------------------- */

/* One call to the daemon; body NULL for a GET. */
static int dcall(const struct cli_daemon *d, const char *verb, const char *path,
                 const cJSON *body, cJSON **out, struct fo_err *err)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = body ? fo_json_canon(body, &b, err) : FO_OK;
    if (!rc)
        rc = cli_daemon_call(d, verb, path, body ? b.data : NULL, out, err);
    fo_buf_release(&b);
    return rc;
}

/* Witnesses feature's run. */
static int witness(const struct cli_daemon *d, const char *id,
                   const char *feature, long long run, struct fo_err *err)
{
    cJSON *in = cJSON_CreateObject(), *out = NULL;
    int rc = in && cJSON_AddStringToObject(in, "campaign_id", id) &&
                     cJSON_AddStringToObject(in, "feature_id", feature) &&
                     fo_json_add_int(in, "run", run)
                 ? dcall(d, "POST", "/campaigns/dispatch", in, &out, err)
                 : fo_err_set(err, FO_E_NOMEM, "out of memory");
    cJSON_Delete(in);
    cJSON_Delete(out);
    return rc;
}

/* Starts f's run and witnesses it. */
static int dispatch(struct cli *c, const struct cli_daemon *d, const char *id,
                    const cJSON *f, struct fo_err *err)
{
    cJSON *in = cJSON_CreateObject(), *out = NULL;
    const char *fid = cli_str_or(f, "feature_id", "");
    int rc = in && cJSON_AddStringToObject(in, "request",
                                           cli_str_or(f, "request", ""))
                 ? dcall(d, "POST", "/runs", in, &out, err)
                 : fo_err_set(err, FO_E_NOMEM, "out of memory");
    long long run = cli_int_or(out, "run", -1);
    cJSON_Delete(in);
    cJSON_Delete(out);
    if (!rc)
        rc = witness(d, id, fid, run, err);
    if (!rc && !c->json)
        printf("dispatched %s: run %lld\n", fid, run);
    return rc;
}

/* One round: adopts runs whose dispatch was not witnessed, dispatches up
 * to max - running runnable features. *busy: something runs (or was just
 * started). */
static int round_of(struct cli *c, const struct cli_daemon *d, char *id,
                    size_t cap, long long max, int *busy, struct fo_err *err)
{
    char path[64 + ORCH_CAMPAIGN_ID_MAX];
    snprintf(path, sizeof(path), "/campaigns/next%s%s",
             id[0] ? "?campaign_id=" : "", id);
    cJSON *next = NULL;
    int rc = dcall(d, "GET", path, NULL, &next, err);
    if (rc)
        return rc;
    snprintf(id, cap, "%s", cli_str_or(next, "campaign_id", ""));
    const cJSON *f;
    cJSON_ArrayForEach (f,
                        cJSON_GetObjectItemCaseSensitive(next, "unwitnessed")) {
        if (!rc &&
            !(rc = witness(d, id, cli_str_or(f, "feature_id", ""),
                           cli_int_or(f, "run", -1), err)) &&
            !c->json)
            printf("adopted %s: run %lld (started before a crash)\n",
                   cli_str_or(f, "feature_id", "?"), cli_int_or(f, "run", -1));
        *busy = 1;
    }
    long long running =
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(next, "running"));
    *busy |= running > 0;
    cJSON_ArrayForEach (f, cJSON_GetObjectItemCaseSensitive(next, "runnable")) {
        if (rc || running >= max)
            break;
        rc = dispatch(c, d, id, f, err);
        running++;
        *busy = 1;
    }
    cJSON_Delete(next);
    return rc;
}

static int run(struct cli *c, int argc, char **argv)
{
    const char *pos[1], *opt = NULL;
    long long max = ORCH_CAMPAIGN_FEATURES_MAX, poll = 200;
    int npos = 0;
    const struct cli_opt opts[] = {
        {"--campaign-id", "ID", CLI_OPT_STR, &opt, 0, 0, NULL, NULL,
         "the campaign (as the positional ID; default: the latest)"},
        {"--max-parallel", "N", CLI_OPT_INT, &max, 1,
         ORCH_CAMPAIGN_FEATURES_MAX, NULL, NULL,
         "runs of the campaign at once (default: all runnable)"},
        {"--poll-ms", "MS", CLI_OPT_INT, &poll, 10, 60000, NULL, NULL,
         "how often the runs are looked at (default 200)"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "campaign run", argc, argv, opts, pos, 1, &npos);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(campaign_usage) : pe;
    if (npos && opt && strcmp(pos[0], opt))
        return cli_usage_error(c, "campaign run: ID and --campaign-id differ");
    const char *given = npos ? pos[0] : opt;
    if (given && !orch_campaign_id_ok(given))
        return cli_usage_error(c,
                               "campaign run: %s: an id is 1..%d of "
                               "A-Za-z0-9._-",
                               given, ORCH_CAMPAIGN_ID_MAX);
    char id[ORCH_CAMPAIGN_ID_MAX + 1];
    snprintf(id, sizeof(id), "%s", given ? given : "");
    struct fo_err err;
    fo_err_clear(&err);
    struct cli_daemon d;
    if (cli_daemon_find(c, &d, &err) != FO_OK)
        return cli_fail(c, &err);
    for (;;) {
        int busy = 0;
        if (round_of(c, &d, id, sizeof(id), max, &busy, &err))
            return cli_fail(c, &err);
        if (!busy)
            break;
        struct timespec ts = {(time_t)(poll / 1000),
                              (long)(poll % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    char path[64 + ORCH_CAMPAIGN_ID_MAX];
    snprintf(path, sizeof(path), "/campaigns/status?campaign_id=%s", id);
    cJSON *st = NULL;
    if (dcall(&d, "GET", path, NULL, &st, &err))
        return cli_fail(c, &err);
    int complete =
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "complete"));
    if (c->json)
        cli_print_json(st, 0);
    else
        print_status(st);
    cJSON_Delete(st);
    return complete ? 0 : 1;
}

int cli_campaign(struct cli *c, int argc, char **argv)
{
    if (argc < 2 || cli_is_help(argv[1])) {
        fputs(campaign_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "declare"))
        return declare(c, argc - 1, argv + 1);
    if (!strcmp(argv[1], "list"))
        return list(c, argc - 1, argv + 1);
    if (!strcmp(argv[1], "status"))
        return view(c, argc - 1, argv + 1, 0);
    if (!strcmp(argv[1], "next"))
        return view(c, argc - 1, argv + 1, 1);
    if (!strcmp(argv[1], "run"))
        return run(c, argc - 1, argv + 1);
    if (!strcmp(argv[1], "ingest-status"))
        return ingest(c, argc - 1, argv + 1);
    return cli_bad_sub(c, "campaign", argv[1],
                       "declare list status next run ingest-status");
}
