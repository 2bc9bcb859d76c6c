/* cli_grade: `forum grade`, `forum export-gradable`, `forum mine` (the
 * outcome grade of a run, and the run as a gradable-trajectory row) and
 * `forum lane list|route|gap` (proof lanes and vocabulary gaps). Each
 * goes through the handler table, so --json prints what HTTP and MCP
 * serve (docs/COMPATIBILITY.md). */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch_grade.h"
#include "daemon/orch_lanes.h"
#include "ledger/fo_json.h"
#include "ledger/proof.h"
#include "surfaces/surf.h"

/* Calls method with in (consumed) on the ledger, opened with flags. */
static int call(struct cli *c, unsigned flags, const char *method, cJSON *in,
                cJSON **out)
{
    struct ledger *l = NULL;
    int ex = cli_open(c, flags, &l);
    if (ex) {
        cJSON_Delete(in);
        return ex;
    }
    ex = cli_call(c, l, method, in, out);
    ledger_close(l);
    return ex;
}

static const char *str(const cJSON *o, const char *k)
{
    return cli_str_or(o, k, "");
}

static void print_strings(const char *label, const cJSON *a)
{
    const cJSON *x;
    printf("%s:", label);
    if (!cJSON_GetArraySize(a))
        printf(" none");
    cJSON_ArrayForEach (x, a)
        printf(" %s", cJSON_IsString(x) ? x->valuestring : "?");
    printf("\n");
}

/* The run and --min-checks of grade and export-gradable, as input. */
static cJSON *grade_in(long long run, long long min)
{
    cJSON *in = cJSON_CreateObject();
    if (in && run >= 0)
        fo_json_add_int(in, "run", run);
    if (in && min >= 0)
        fo_json_add_int(in, "min_checks", min);
    return in;
}

/* ---- grade --------------------------------------------------------------- */

static const char grade_usage[] =
    "usage: forum grade [RUN] [--min-checks N] [--json]\n"
    "The outcome grade of a run (default: the latest request), from its\n"
    "checks on record: verdicts, verifications and intent judgments. A check\n"
    "counts only when its actor produced no result or answer in the run (a\n"
    "producer cannot grade itself), and only with a yes or no. PASS: every\n"
    "counted check passed and there are at least N (default 2); FAIL: one\n"
    "was refuted, or too few; UNVERIFIABLE: none counts. RUN may also be an\n"
    "import entry (`forum mine`). The exit status is 0 whatever the label\n"
    "(as the reference's): read the label.\n"
    "  --min-checks N   independent checks a PASS needs (0 to 1000)\n"
    "example:\n  forum grade --min-checks 2\n";

static void grade_text(const cJSON *g)
{
    printf("run %lld: %s  reward %g  (%lld check%s counted, %lld refuted; "
           "%lld needed)\n",
           cli_int_or(g, "run", -1), str(g, "label"),
           cJSON_GetObjectItemCaseSensitive(g, "reward")->valuedouble,
           cli_int_or(g, "checks", 0),
           cli_int_or(g, "checks", 0) == 1 ? "" : "s",
           cli_int_or(g, "refuted", 0), cli_int_or(g, "min_checks", 0));
    print_strings("producers",
                  cJSON_GetObjectItemCaseSensitive(g, "producers"));
    const cJSON *x;
    cJSON_ArrayForEach (x, cJSON_GetObjectItemCaseSensitive(g, "grade_inputs"))
        printf("  %s seq %lld by %s: %s\n", str(x, "kind"),
               cli_int_or(x, "seq", -1), str(x, "actor"),
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "ok"))
                   ? "passed"
                   : "refuted");
    const cJSON *self = cJSON_GetObjectItemCaseSensitive(g, "self_graded");
    if (cJSON_GetArraySize(self)) {
        printf("set aside (a producer grading itself): seq");
        cJSON_ArrayForEach (x, self)
            printf(" %.0f", x->valuedouble);
        printf("\n");
    }
}

int cli_grade(struct cli *c, int argc, char **argv)
{
    long long min = -1;
    const char *pos[1];
    int npos = 0;
    const struct cli_opt opts[] = {
        {"--min-checks", "N", CLI_OPT_INT, &min, 0, ORCH_GRADE_MIN_CHECKS_MAX,
         NULL, NULL, "independent checks a PASS needs (default 2)"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "grade", argc, argv, opts, pos, 1, &npos);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(grade_usage) : pe;
    long long run = npos ? cli_parse_seq(pos[0]) : -1;
    if (npos && run < 0)
        return cli_usage_error(c, "grade: %s: not a run id", pos[0]);
    cJSON *out = NULL;
    int ex = call(c, LEDGER_OPEN_READONLY, "grade", grade_in(run, min), &out);
    if (ex)
        return ex;
    if (c->json)
        cli_print_json(out, 0);
    else
        grade_text(out);
    cJSON_Delete(out);
    return 0;
}

/* ---- export-gradable, mine ---------------------------------------------- */

/* Appends row as one line of canonical JSON to path. */
static int append_row(struct cli *c, const char *path, const cJSON *row)
{
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = fo_json_canon(row, &b, &err);
    if (!rc) {
        FILE *f = fopen(path, "a");
        int bad =
            !f || fwrite(b.data, 1, b.len, f) != b.len || fputc('\n', f) == EOF;
        if (f && fclose(f))
            bad = 1;
        if (bad)
            rc = fo_err_set(&err, FO_E_IO, "%s: cannot append: %s", path,
                            strerror(errno));
    }
    fo_buf_release(&b);
    return rc ? cli_fail(c, &err) : 0;
}

/* A row out: appended to out_path (and a line saying so), or printed. */
static int emit_row(struct cli *c, const char *what, const char *out_path,
                    const cJSON *row)
{
    if (!out_path) {
        cli_print_json(row, 0);
        return 0;
    }
    int ex = append_row(c, out_path, row);
    if (ex)
        return ex;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(row, "grade");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(row, "oracle");
    printf("%s run %lld -> %s (grade=%s reward=%g, root %.12s... at size "
           "%lld)\n",
           what, cli_int_or(row, "run", -1), out_path, str(g, "label"),
           cJSON_GetObjectItemCaseSensitive(g, "reward")->valuedouble,
           str(o, "root"), cli_int_or(o, "size", 0));
    return 0;
}

/* --check FILE: every row of a JSONL file re-derived (orch_gradable_check),
 * and its root compared with this ledger's at its size when the ledger
 * holds that many entries. */
static int check_rows(struct cli *c, const char *path)
{
    struct fo_buf b;
    struct fo_err err;
    fo_err_clear(&err);
    if (cli_read_file(path, 1u << 30, &b, &err))
        return cli_fail(c, &err); /* b is not set then */
    struct ledger *l = NULL;
    if (ledger_open(c->ledger_dir, LEDGER_OPEN_READONLY, NULL, &l, &err))
        l = NULL; /* no ledger here: the rows are checked alone */
    int bad = 0, n = 0;
    for (char *line = b.data, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        size_t len = next ? (size_t)(next - line) : strlen(line);
        if (next)
            next++;
        if (!len)
            continue;
        n++;
        cJSON *row = NULL;
        int rc = fo_json_parse(line, len, &row, &err);
        if (!rc)
            rc = orch_gradable_check(row, &err);
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(row, "oracle");
        long long size = cli_int_or(o, "size", 0);
        int64_t count = 0;
        uint8_t root[32];
        char hex[65];
        if (!rc && l && ledger_count(l, &count, &err) == FO_OK &&
            size <= count && ledger_root(l, size, root, &err) == FO_OK) {
            fo_hex(root, 32, hex);
            if (strcmp(hex, str(o, "root")))
                rc = fo_err_set(&err, FO_E_VERIFY,
                                "root: not this ledger's root at size %lld",
                                size);
        }
        if (rc)
            printf("row %d (run %lld): FAIL %s\n", n,
                   cli_int_or(row, "run", -1), err.msg);
        else
            printf("row %d (run %lld): ok%s\n", n, cli_int_or(row, "run", -1),
                   l && size <= count ? ", the ledger's root" : "");
        bad += rc != 0;
        cJSON_Delete(row);
    }
    ledger_close(l);
    fo_buf_release(&b);
    if (!n)
        printf("%s: no rows\n", path);
    return bad || !n ? 1 : 0;
}

static const char export_usage[] =
    "usage: forum export-gradable [RUN] [--min-checks N] [--out FILE]\n"
    "       forum export-gradable --check FILE\n"
    "A run (default: the latest request) as one forum.gradable-trajectory/1\n"
    "row: its prompt, its entries, its grade (forum grade --help), the\n"
    "checks' bodies, and an inclusion proof of every entry at the ledger's\n"
    "root, so the row re-derives from the ledger with SHA-256 alone.\n"
    "Printed as one line of JSON, or appended to FILE. --check re-derives\n"
    "every row of FILE (hashes, proofs, the grade from the bound bodies) and\n"
    "compares its root with this ledger's; exit 1 when one does not hold.\n"
    "  --min-checks N   independent checks a PASS needs (default 2)\n"
    "  --out FILE       append the row to FILE (JSON lines)\n"
    "  --check FILE     re-derive the rows of FILE\n"
    "example:\n  forum export-gradable 12 --out runs.jsonl\n";

int cli_export_gradable(struct cli *c, int argc, char **argv)
{
    long long min = -1;
    const char *out_path = NULL, *check = NULL, *pos[1];
    int npos = 0;
    const struct cli_opt opts[] = {
        {"--min-checks", "N", CLI_OPT_INT, &min, 0, ORCH_GRADE_MIN_CHECKS_MAX,
         NULL, NULL, "independent checks a PASS needs (default 2)"},
        {"--out", "FILE", CLI_OPT_STR, &out_path, 0, 0, NULL, NULL,
         "append the row to FILE (JSON lines)"},
        {"--check", "FILE", CLI_OPT_STR, &check, 0, 0, NULL, NULL,
         "re-derive the rows of FILE against this ledger"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "export-gradable", argc, argv, opts, pos, 1, &npos);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(export_usage) : pe;
    if (check)
        return npos || out_path || min >= 0
                   ? cli_usage_error(c, "export-gradable: --check takes no "
                                        "run, --out or --min-checks")
                   : check_rows(c, check);
    long long run = npos ? cli_parse_seq(pos[0]) : -1;
    if (npos && run < 0)
        return cli_usage_error(c, "export-gradable: %s: not a run id", pos[0]);
    cJSON *row = NULL;
    int ex = call(c, LEDGER_OPEN_READONLY, "export_gradable",
                  grade_in(run, min), &row);
    if (!ex)
        ex = emit_row(c, "wrote", out_path, row);
    cJSON_Delete(row);
    return ex;
}

/* The reference's generic trace is a JSON array of events; forum's
 * importer reads one event a line. An array becomes its lines. */
static int array_to_lines(struct fo_buf *b, struct fo_err *err)
{
    size_t i = 0;
    while (i < b->len && strchr(" \t\r\n", b->data[i]))
        i++;
    if (i == b->len || b->data[i] != '[')
        return FO_OK;
    cJSON *a = NULL;
    int rc = fo_json_parse(b->data, b->len, &a, err);
    if (rc)
        return rc;
    struct fo_buf out;
    fo_buf_init(&out, FO_BUF_UNLIMITED);
    const cJSON *ev;
    cJSON_ArrayForEach (ev, a) {
        if ((rc = fo_json_canon(ev, &out, err)) ||
            (rc = fo_buf_putc(&out, '\n')))
            break;
    }
    cJSON_Delete(a);
    if (!rc && !out.len)
        rc = fo_err_set(err, FO_E_INVALID, "the trace has no events");
    if (rc) {
        fo_buf_release(&out);
        return rc;
    }
    fo_buf_release(b);
    *b = out;
    return FO_OK;
}

static int read_trace(const char *path, struct fo_buf *b, struct fo_err *err)
{
    fo_buf_init(b, 64u << 20); /* cli_read_file leaves it unset on error */
    if (strcmp(path, "-"))
        return cli_read_file(path, 64u << 20, b, err);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), stdin)) > 0)
        if (fo_buf_append(b, chunk, n))
            return fo_err_set(err, FO_E_INVALID, "stdin: more than 64 MiB");
    return ferror(stdin) ? fo_err_set(err, FO_E_IO, "stdin: read error")
                         : FO_OK;
}

static const char mine_usage[] =
    "usage: forum mine FILE [--format F] [--out FILE] [--min-checks N]\n"
    "An agent trace made a graded, provable row in one step: FILE (or - for\n"
    "stdin) is imported into the ledger (forum import --help; one import\n"
    "entry and one entry per event, in one transaction), then exported as\n"
    "a forum.gradable-trajectory/1 row of that import (forum export-gradable\n"
    "--help). Formats: generic (the default: events of {id, actor, kind,\n"
    "parent, payload}, a JSON array or one a line), otel, langsmith.\n"
    "  --format F       generic, jsonl, otel or langsmith\n"
    "  --out FILE       append the row to FILE (JSON lines)\n"
    "  --min-checks N   independent checks a PASS needs (default 2)\n"
    "example:\n  forum mine trace.json --out dataset.jsonl\n";

int cli_mine(struct cli *c, int argc, char **argv)
{
    long long min = -1;
    const char *format = "generic", *out_path = NULL, *pos[1];
    int npos = 0;
    const struct cli_opt opts[] = {
        {"--format", "F", CLI_OPT_STR, &format, 0, 0, NULL, NULL,
         "generic, jsonl, otel or langsmith"},
        {"--out", "FILE", CLI_OPT_STR, &out_path, 0, 0, NULL, NULL,
         "append the row to FILE (JSON lines)"},
        {"--min-checks", "N", CLI_OPT_INT, &min, 0, ORCH_GRADE_MIN_CHECKS_MAX,
         NULL, NULL, "independent checks a PASS needs (default 2)"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "mine", argc, argv, opts, pos, 1, &npos);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(mine_usage) : pe;
    if (!npos)
        return cli_usage_error(c, "mine: FILE is required");
    int generic = !strcmp(format, "generic") || !strcmp(format, "jsonl");
    if (!generic && strcmp(format, "otel") && strcmp(format, "langsmith"))
        return cli_usage_error(c,
                               "mine: --format %s: forum reads generic, jsonl, "
                               "otel and langsmith",
                               format);
    struct fo_err err;
    fo_err_clear(&err);
    struct fo_buf data;
    if (read_trace(pos[0], &data, &err) ||
        (generic && array_to_lines(&data, &err))) {
        fo_buf_release(&data);
        fo_err_prefix(&err, "mine: %s", pos[0]);
        return cli_fail(c, &err);
    }
    const char *slash = strrchr(pos[0], '/');
    cJSON *in = cJSON_CreateObject(), *imp = NULL, *row = NULL;
    if (in) {
        cJSON_AddStringToObject(in, "format", generic ? "jsonl" : format);
        cJSON_AddStringToObject(in, "data", data.data ? data.data : "");
        if (strcmp(pos[0], "-"))
            cJSON_AddStringToObject(in, "name", slash ? slash + 1 : pos[0]);
    }
    fo_buf_release(&data);
    struct ledger *l = NULL;
    int ex = cli_open(c, LEDGER_OPEN_CREATE, &l);
    if (ex)
        cJSON_Delete(in);
    else if ((ex = cli_call(c, l, "ledger_import", in, &imp)) == 0)
        ex = cli_call(c, l, "export_gradable",
                      grade_in(cli_int_or(imp, "import_seq", -1), min), &row);
    ledger_close(l);
    if (!ex)
        ex = emit_row(c, "mined", out_path, row);
    cJSON_Delete(imp);
    cJSON_Delete(row);
    return ex;
}

/* ---- lane list|route|gap ------------------------------------------------ */

static const char lane_usage[] =
    "usage: forum lane list [--json]\n"
    "       forum lane route TASK --lane L [--scope S]... [--domain D]\n"
    "                        [--confidence X] [--parent SEQ] [--json]\n"
    "       forum lane gap --signal NAME [--min N] [--since SEQ] [--json]\n"
    "Proof lanes: a closed vocabulary of lanes (observe, execute, validate,\n"
    "synthesize, verify), each granting scopes, and of domain lanes. `route`\n"
    "judges a claim and witnesses it: a lane_route entry, or a\n"
    "lane_rejection entry (an unknown lane or domain, or a scope the lane\n"
    "does not grant) and exit 2. `gap` witnesses a vocabulary_gap receipt\n"
    "when the last N (default 3) route entries all escalated.\n"
    "example:\n  forum lane route \"run the build\" --lane execute --scope "
    "read "
    "--scope run\n";

static int lane_list(struct cli *c, int argc, char **argv)
{
    const struct cli_opt opts[] = {CLI_OPT_END};
    int pe = cli_parse(c, "lane list", argc, argv, opts, NULL, 0, NULL);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(lane_usage) : pe;
    cJSON *out = orch_lanes_json();
    if (!out)
        return cli_fail(c, &(struct fo_err){FO_E_NOMEM, ""});
    if (c->json) {
        cli_print_json(out, 0);
    } else {
        const cJSON *x;
        cJSON_ArrayForEach (
            x, cJSON_GetObjectItemCaseSensitive(out, "proof_lanes")) {
            printf("%-11s %s; grants", str(x, "name"), str(x, "authority"));
            print_strings("", cJSON_GetObjectItemCaseSensitive(x, "scopes"));
        }
        printf("domain lanes:\n");
        cJSON_ArrayForEach (
            x, cJSON_GetObjectItemCaseSensitive(out, "domain_lanes"))
            printf("  %-19s %s\n", str(x, "name"), str(x, "charter"));
    }
    cJSON_Delete(out);
    return 0;
}

static int lane_route(struct cli *c, int argc, char **argv)
{
    const char *lane = NULL, *domain = NULL, *conf = NULL, *pos[1];
    const char *scopes[ORCH_LANE_SCOPES_MAX];
    int nscopes = 0, npos = 0;
    long long parent = -1;
    const struct cli_opt opts[] = {
        {"--lane", "L", CLI_OPT_STR, &lane, 0, 0, NULL, NULL,
         "the proof lane claimed"},
        {"--scope", "S", CLI_OPT_LIST, scopes, 0, ORCH_LANE_SCOPES_MAX,
         &nscopes, NULL, "a scope claimed (repeat)"},
        {"--domain", "D", CLI_OPT_STR, &domain, 0, 0, NULL, NULL,
         "the domain lane claimed"},
        {"--confidence", "X", CLI_OPT_STR, &conf, 0, 0, NULL, NULL,
         "the router's score"},
        {"--parent", "SEQ", CLI_OPT_INT, &parent, 0, INT64_MAX, NULL,
         "not a seq", "the entry the route answers (a request)"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "lane route", argc, argv, opts, pos, 1, &npos);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(lane_usage) : pe;
    if (!npos || !lane)
        return cli_usage_error(c, "lane route: TASK and --lane are required");
    cJSON *in = cJSON_CreateObject();
    cJSON *sa = in ? cJSON_AddArrayToObject(in, "scopes") : NULL;
    for (int i = 0; sa && i < nscopes; i++)
        cJSON_AddItemToArray(sa, cJSON_CreateString(scopes[i]));
    if (conf) {
        char *end;
        errno = 0;
        double x = strtod(conf, &end);
        if (errno || *end || !*conf || !isfinite(x)) {
            cJSON_Delete(in);
            return cli_usage_error(c,
                                   "lane route: --confidence %s: not a "
                                   "number",
                                   conf);
        }
        cJSON_AddNumberToObject(in, "confidence", x);
    }
    cJSON_AddStringToObject(in, "task", pos[0]);
    cJSON_AddStringToObject(in, "lane", lane);
    if (domain)
        cJSON_AddStringToObject(in, "domain", domain);
    if (parent >= 0)
        fo_json_add_int(in, "parent", parent);
    cJSON *out = NULL;
    int ex = call(c, LEDGER_OPEN_CREATE, "lane_route", in, &out);
    if (ex)
        return ex;
    if (c->json)
        cli_print_json(out, 0);
    else
        printf("lane_route seq %lld: %s accepted\n", cli_int_or(out, "seq", -1),
               lane);
    cJSON_Delete(out);
    return 0;
}

static int lane_gap(struct cli *c, int argc, char **argv)
{
    const char *signal = NULL;
    long long min = ORCH_GAP_MIN_DEFAULT, since = 0;
    const struct cli_opt opts[] = {
        {"--signal", "NAME", CLI_OPT_STR, &signal, 0, 0, NULL, NULL,
         "the name the operator gives the pattern"},
        {"--min", "N", CLI_OPT_INT, &min, 1, 1000000, NULL, NULL,
         "trailing escalations that make a gap (default 3)"},
        {"--since", "SEQ", CLI_OPT_INT, &since, 0, INT64_MAX, NULL, "not a seq",
         "read route entries from SEQ on"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "lane gap", argc, argv, opts, NULL, 0, NULL);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(lane_usage) : pe;
    if (!signal)
        return cli_usage_error(c, "lane gap: --signal is required");
    cJSON *in = cJSON_CreateObject(), *out = NULL;
    cJSON_AddStringToObject(in, "domain_signal", signal);
    fo_json_add_int(in, "min_escalations", min);
    fo_json_add_int(in, "since", since);
    int ex = call(c, LEDGER_OPEN_CREATE, "vocabulary_gap", in, &out);
    if (ex)
        return ex;
    if (c->json) {
        cli_print_json(out, 0);
    } else if (cJSON_IsTrue(
                   cJSON_GetObjectItemCaseSensitive(out, "witnessed"))) {
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(out, "gap");
        printf("vocabulary_gap seq %lld: %lld routes in a row escalated "
               "(seqs %lld..%lld, confidence at most %g)\n",
               cli_int_or(out, "seq", -1),
               cli_int_or(g, "consecutive_escalations", 0),
               cli_int_or(g, "first_seq", -1), cli_int_or(g, "last_seq", -1),
               cJSON_GetObjectItemCaseSensitive(g, "confidence_ceiling")
                   ->valuedouble);
    } else {
        printf("no gap: %lld trailing escalation%s of %lld route%s read, "
               "fewer than %lld; nothing witnessed\n",
               cli_int_or(out, "trailing_undecided", 0),
               cli_int_or(out, "trailing_undecided", 0) == 1 ? "" : "s",
               cli_int_or(out, "routes_read", 0),
               cli_int_or(out, "routes_read", 0) == 1 ? "" : "s", min);
    }
    cJSON_Delete(out);
    return 0;
}

int cli_lane(struct cli *c, int argc, char **argv)
{
    if (argc < 2 || cli_is_help(argv[1])) {
        fputs(lane_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "list"))
        return lane_list(c, argc - 1, argv + 1);
    if (!strcmp(argv[1], "route"))
        return lane_route(c, argc - 1, argv + 1);
    if (!strcmp(argv[1], "gap"))
        return lane_gap(c, argc - 1, argv + 1);
    return cli_bad_sub(c, "lane", argv[1], "list route gap");
}
