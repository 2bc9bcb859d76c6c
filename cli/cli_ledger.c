/* cli_ledger: `forum ledger ...`: init, append, get, body, show, replay,
 * chain, verify, redact, summary. Each data command maps onto one method of
 * the handler table, so --json prints exactly what HTTP and MCP serve. */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ledger/fo_json.h"
#include "surfaces/surf.h"

static const char ledger_usage[] =
    "usage: forum [--ledger DIR] ledger <command> [options]\n"
    "\n"
    "commands:\n"
    "  init [--origin NAME] [--postgres CONNINFO]\n"
    "                               create the ledger (idempotent); in\n"
    "                               PostgreSQL with --postgres\n"
    "  append --actor A --kind K --payload JSON|@FILE|- [--parent N]\n"
    "                               append one entry; prints it\n"
    "  get SEQ                      one entry, with body present/redacted\n"
    "  body SEQ                     the JSON body of an entry\n"
    "  show [--limit N]             the last N entries (default 20)\n"
    "  tail [-n N] [-f] [--kind K] [--run RUN]\n"
    "                               the last entries, then follow new ones\n"
    "  replay SEQ [--from N] [--limit N]\n"
    "                               entries 0..SEQ (the log as it stood)\n"
    "  chain SEQ                    the causal chain of SEQ, root first\n"
    "  verify [--deep] [--checkpoint NOTE --vkey KEY]\n"
    "                               verify chain and tree (deep: bodies;\n"
    "                               checkpoint: against a signed one)\n"
    "  checkpoint [--sign] [--size N]  the latest signed checkpoint\n"
    "  prove SEQ [--size N]         inclusion proof of an entry\n"
    "  consistency A [B]            consistency proof between tree sizes\n"
    "  key                          the checkpoint verifier key\n"
    "  bundle SEQ [-o FILE]         a self-contained proof of one entry\n"
    "  tiles --out DIR              the log as static C2SP tlog-tiles\n"
    "  witness add VKEY | list      the witnesses whose cosignatures count\n"
    "  cosign NOTE                  store witness cosignatures on a\n"
    "                               checkpoint\n"
    "  redact SEQ --reason R        delete a body, witnessed\n"
    "  summary                      counts by kind and actor\n"
    "  capsule [--text]             a deterministic brief of the ledger\n"
    "  room [RUN] [--text]          one operator view of a run\n"
    "  backup FILE                  an online, verified copy of the ledger\n"
    "  restore FILE [--replace]     a backup made the ledger, verified first\n"
    "  export [-o FILE]             the log as JSON lines, bodies included\n"
    "  import FILE|-                an export made a new ledger, same hashes\n"
    "\n"
    "options for every command: --json (print the result object), --help\n"
    "exit codes: 0 ok, 1 verification failed or not found, 2 bad input,\n"
    "            3 I/O or storage error\n";

/* Reads a payload argument: inline JSON, @FILE, or - for stdin. At most
 * max bytes of text are read. */
static int read_payload(const char *arg, size_t max, struct fo_buf *out,
                        struct fo_err *err)
{
    if (strcmp(arg, "-") != 0 && arg[0] != '@') {
        int rc = fo_buf_puts(out, arg);
        return rc == FO_E_TOO_LARGE
                   ? fo_err_set(err, FO_E_TOO_LARGE, "payload: too large")
                   : rc;
    }
    FILE *f = stdin;
    if (arg[0] == '@') {
        f = fopen(arg + 1, "rb");
        if (!f)
            return fo_err_set(err, FO_E_INVALID,
                              "payload file %s: cannot "
                              "open",
                              arg + 1);
    }
    char chunk[65536];
    int rc = FO_OK;
    size_t n;
    fo_buf_init(out, max);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        rc = fo_buf_append(out, chunk, n);
        if (rc == FO_E_TOO_LARGE) {
            rc = fo_err_set(err, FO_E_TOO_LARGE,
                            "payload: more than %zu bytes of text", max);
            break;
        }
        if (rc)
            break;
    }
    if (rc == FO_OK && ferror(f))
        rc = fo_err_set(err, FO_E_IO, "payload: read error");
    if (f != stdin)
        fclose(f);
    return rc;
}

static int cmd_init(struct cli *c, int argc, char **argv)
{
    const char *origin = NULL, *conninfo = NULL;
    const struct cli_opt opts[] = {
        {"--origin", "NAME", CLI_OPT_STR, &origin, 0, 0, NULL, NULL,
         "the name of its checkpoints"},
        {"--postgres", "CONNINFO", CLI_OPT_STR, &conninfo, 0, 0, NULL, NULL,
         "keep it in PostgreSQL (a libpq connection string)"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "ledger init", argc, argv, opts, NULL, 0, NULL);
    if (pe == CLI_PARSE_HELP)
        return cli_help(
            "usage: forum ledger init [--origin NAME] [--postgres "
            "CONNINFO]\n"
            "Creates the ledger in the data dir (--ledger DIR); the "
            "origin names\nits checkpoints (default forum/<ledger id>). "
            "Safe to run twice.\n"
            "--postgres keeps the ledger in a PostgreSQL database "
            "instead of\nDIR/ledger.db: CONNINFO is a libpq connection "
            "string (\"host=/run/postgresql\nport=5432 dbname=forum "
            "user=forum\" or a postgresql:// URI), written to\n"
            "DIR/store.json. Never put the password in it: libpq reads "
            "PGPASSWORD\nor PGPASSFILE (~/.pgpass). Exit 3 when the "
            "database cannot be reached.\n"
            "examples:\n  forum ledger init --origin example.com/forum\n"
            "  forum ledger init --postgres \"host=/run/postgresql "
            "dbname=forum user=forum\"\n");
    if (pe)
        return pe;
    struct ledger_config cfg = {.origin = origin};
    struct ledger *l = NULL;
    struct fo_err err;
    fo_err_clear(&err);
    /* what this init makes and must take back if the database cannot be
     * reached: the store.json naming it, and the data dir when it was new */
    char conf[4096];
    snprintf(conf, sizeof(conf), "%s/store.json", c->ledger_dir);
    struct stat st;
    int had_dir = stat(c->ledger_dir, &st) == 0;
    int had_conf = stat(conf, &st) == 0;
    if (conninfo && ledger_use_postgres(c->ledger_dir, conninfo, &err) != 0)
        return err.code == FO_E_INVALID
                   ? cli_usage_error(c, "init: %s", err.msg)
                   : cli_fail(c, &err);
    int rc = ledger_open(c->ledger_dir, LEDGER_OPEN_CREATE, &cfg, &l, &err);
    if (rc) {
        if (conninfo && !had_conf) {
            unlink(conf);
            if (!had_dir)
                rmdir(c->ledger_dir); /* only when left empty */
        }
        return cli_fail(c, &err);
    }
    if (origin && strcmp(origin, ledger_origin(l)) != 0) {
        fo_err_set(&err, FO_E_EXISTS,
                   "%s: ledger exists with origin %s (the origin is fixed "
                   "at creation)",
                   c->ledger_dir, ledger_origin(l));
        ledger_close(l);
        return cli_fail(c, &err);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "ledger", c->ledger_dir);
    cJSON_AddStringToObject(o, "ledger_id", ledger_id(l));
    cJSON_AddStringToObject(o, "origin", ledger_origin(l));
    cJSON_AddStringToObject(o, "store", ledger_store_name(l));
    if (c->json)
        cli_print_json(o, 0);
    else
        printf("ledger %s: id %s, origin %s, store %s\n", c->ledger_dir,
               ledger_id(l), ledger_origin(l), ledger_store_name(l));
    cJSON_Delete(o);
    ledger_close(l);
    return 0;
}

/* The entries of a JSONL stream, a batch at a time: each batch is checked
 * whole (a bad line names its number, and nothing of its batch is
 * written), then appended in one transaction. */
#define JSONL_BATCH 4096
#define JSONL_LINE_MAX (2u << 20)

struct jsonl_batch {
    struct ledger_append reqs[JSONL_BATCH];
    struct fo_buf bodies[JSONL_BATCH];
    cJSON *objs[JSONL_BATCH];
    size_t n;
};

static void batch_clear(struct jsonl_batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        fo_buf_release(&b->bodies[i]);
        cJSON_Delete(b->objs[i]);
    }
    b->n = 0;
}

static int batch_flush(struct ledger *l, struct jsonl_batch *b, long long *done,
                       struct fo_err *err)
{
    int rc = cli_append_all(l, b->reqs, b->n, err);
    if (!rc)
        *done += (long long)b->n;
    batch_clear(b);
    return rc;
}

static int append_jsonl(struct cli *c, const char *path)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        struct fo_err err;
        fo_err_set(&err, FO_E_IO, "%s: %s", path, strerror(errno));
        return cli_fail(c, &err);
    }
    struct ledger *l = NULL;
    int ex = cli_open(c, LEDGER_OPEN_CREATE, &l);
    struct jsonl_batch *b = ex ? NULL : calloc(1, sizeof(*b));
    struct fo_err err;
    fo_err_clear(&err);
    int rc = ex ? FO_OK : b ? FO_OK : fo_err_set(&err, FO_E_NOMEM, NULL);
    int64_t base = 0;
    if (!ex && !rc)
        rc = ledger_count(l, &base, &err);
    char *line = NULL;
    size_t cap = 0;
    long long lineno = 0, done = 0;
    int tty = isatty(2);
    int64_t t0 = ledger_mono_us(), shown = t0;
    ssize_t len;
    while (!ex && !rc && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue; /* a blank line is no entry */
        if ((size_t)len > JSONL_LINE_MAX) {
            rc = fo_err_set(&err, FO_E_TOO_LARGE, "over %u bytes",
                            JSONL_LINE_MAX);
        } else {
            cJSON *o = NULL;
            rc = fo_json_parse(line, (size_t)len, &o, &err);
            if (!rc) {
                b->objs[b->n] = o;
                rc = surf_batch_entry(l, o, base, &b->reqs[b->n],
                                      &b->bodies[b->n], &err);
                if (rc)
                    cJSON_Delete(o);
                else
                    b->n++;
            }
        }
        if (rc) {
            fo_err_prefix(&err, "%s: line %lld", path, lineno);
            break;
        }
        if (b->n == JSONL_BATCH)
            rc = batch_flush(l, b, &done, &err);
        int64_t now = ledger_mono_us();
        if (tty && now - shown > 500000) {
            fprintf(stderr, "\rforum: %lld entries appended, %.0f/s", done,
                    (double)done * 1e6 / (double)(now - t0 + 1));
            shown = now;
        }
    }
    if (!ex && !rc && ferror(f))
        rc = fo_err_set(&err, FO_E_IO, "%s: read error", path);
    if (!ex && !rc)
        rc = batch_flush(l, b, &done, &err);
    if (b)
        batch_clear(b);
    if (tty && done)
        fputc('\n', stderr);
    free(line);
    free(b);
    if (f != stdin)
        fclose(f);
    ledger_close(l);
    if (ex)
        return ex;
    if (rc) {
        if (done)
            fprintf(stderr, "forum: %lld entries before it were appended\n",
                    done);
        return cli_fail(c, &err);
    }
    double secs = (double)(ledger_mono_us() - t0) / 1e6;
    if (c->json)
        printf("{\"appended\":%lld,\"lines\":%lld}\n", done, lineno);
    else
        printf("appended %lld entries (%.0f/s)\n", done,
               secs > 0 ? (double)done / secs : 0.0);
    return 0;
}

static int cmd_append(struct cli *c, int argc, char **argv)
{
    const char *actor = NULL, *kind = NULL, *payload = NULL;
    const char *jsonl = NULL;
    long long pseq = -1;
    const struct cli_opt opts[] = {
        {"--actor", "A", CLI_OPT_STR, &actor, 0, 0, NULL, NULL,
         "who appends the entry"},
        {"--kind", "K", CLI_OPT_STR, &kind, 0, 0, NULL, NULL,
         "the entry's kind"},
        {"--payload", "JSON|@FILE|-", CLI_OPT_STR, &payload, 0, 0, NULL, NULL,
         "its body: inline JSON, @FILE reads a file, - reads stdin"},
        {"--parent", "N", CLI_OPT_INT, &pseq, 0, INT64_MAX, NULL, "not a seq",
         "the seq that caused this entry"},
        {"--jsonl", "FILE|-", CLI_OPT_STR, &jsonl, 0, 0, NULL, NULL,
         "many entries, one a line, from FILE (- for stdin)"},
        CLI_OPT_END,
    };
    /* before anything is read: --payload - and --jsonl - take stdin */
    int pe = cli_parse(c, "ledger append", argc, argv, opts, NULL, 0, NULL);
    if (pe == CLI_PARSE_HELP)
        return cli_help(
            "usage: forum ledger append --actor A --kind K "
            "--payload JSON|@FILE|- [--parent N]\n"
            "       forum ledger append --jsonl FILE|-\n"
            "Appends one entry and prints it once it is durable; with\n"
            "--jsonl, one entry a line ({actor, kind, payload, "
            "parent?}),\n"
            "4096 lines to a transaction, progress on a terminal. A bad\n"
            "line is named by its number and nothing of its batch is\n"
            "written (the batches before it are). A parent must be on\n"
            "record before the file's first line.\n"
            "  --payload JSON   inline; @FILE reads a file; - reads "
            "stdin\n"
            "  --parent N       the seq that caused this entry\n"
            "  --jsonl FILE     many entries from FILE (- for stdin)\n"
            "examples:\n"
            "  forum ledger append --actor me --kind note --payload "
            "'{\"text\":\"hi\"}'\n"
            "  forum ledger append --jsonl steps.jsonl\n");
    if (pe)
        return pe;
    if (jsonl && (actor || kind || payload || pseq >= 0))
        return cli_usage_error(c, "append: --jsonl takes its entries from the "
                                  "file, not from --actor/--kind/--payload");
    if (jsonl)
        return append_jsonl(c, jsonl);
    if (!actor || !kind || !payload)
        return cli_usage_error(c, "append: %s",
                               "--actor, --kind and --payload "
                               "are required");

    struct ledger *l = NULL;
    int ex = cli_open(c, LEDGER_OPEN_CREATE, &l);
    if (ex)
        return ex;
    struct fo_err err;
    fo_err_clear(&err);
    struct fo_buf text;
    fo_buf_init(&text, 16 * ledger_max_body(l) + 4096);
    cJSON *value = NULL, *in = NULL, *out = NULL;
    int rc = read_payload(payload, text.max, &text, &err);
    if (!rc)
        rc = fo_json_parse(text.data ? text.data : "", text.len, &value, &err);
    fo_buf_release(&text);
    if (rc) {
        if (rc == FO_E_JSON)
            fo_err_prefix(&err, "payload");
        ex = cli_fail(c, &err);
        goto out;
    }
    in = cJSON_CreateObject();
    cJSON_AddStringToObject(in, "actor", actor);
    cJSON_AddStringToObject(in, "kind", kind);
    cJSON_AddItemToObject(in, "payload", value);
    if (pseq >= 0)
        fo_json_add_int(in, "parent", pseq);
    ex = cli_call(c, l, "ledger_append", in, &out);
    if (!ex)
        cli_print_json(out, !c->json);
out:
    cJSON_Delete(out);
    ledger_close(l);
    return ex;
}

/* "ledger SUB", for messages. */
static const char *cmd_name(const char *sub)
{
    static char name[64];
    snprintf(name, sizeof(name), "ledger %.40s", sub);
    return name;
}

/* The commands that take one SEQ and print the method's result. */
static void print_entry_text(const cJSON *e);
static void print_chain_text(const cJSON *entries);

static int cmd_seq(struct cli *c, int argc, char **argv, const char *method,
                   const char *usage)
{
    const char *seq = NULL;
    const struct cli_opt opts[] = {CLI_OPT_END};
    int pe = cli_parse(c, cmd_name(argv[0]), argc, argv, opts, &seq, 1, NULL);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(usage) : pe;
    long long s = cli_parse_seq(seq);
    if (s < 0)
        return cli_usage_error(
            c, "%s: a SEQ (a non-negative integer) is needed", argv[0]);
    struct ledger *l = NULL;
    int ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (ex)
        return ex;
    cJSON *in = cJSON_CreateObject(), *out = NULL;
    fo_json_add_int(in, "seq", s);
    ex = cli_call(c, l, method, in, &out);
    if (!ex) {
        const cJSON *entries = cJSON_GetObjectItemCaseSensitive(out, "entries");
        if (c->json)
            cli_print_json(out, 0);
        else if (!strcmp(method, "ledger_body"))
            cli_print_json(cJSON_GetObjectItemCaseSensitive(out, "body"), 1);
        else if (entries)
            print_chain_text(entries);
        else if (!strcmp(method, "ledger_get"))
            print_entry_text(out);
        else
            cli_print_json(out, 1);
    }
    cJSON_Delete(out);
    ledger_close(l);
    return ex;
}

/* An entry's ts (microseconds) as local time, to the microsecond. */
static void local_time(double ts_us, char *out, size_t n)
{
    time_t t = (time_t)(ts_us / 1e6);
    struct tm tm;
    char base[32] = "?";
    if (localtime_r(&t, &tm))
        strftime(base, sizeof(base), "%Y-%m-%d %H:%M:%S", &tm);
    char zone[16] = "";
    if (localtime_r(&t, &tm))
        strftime(zone, sizeof(zone), "%Z", &tm);
    snprintf(out, n, "%s.%06lld %s", base,
             (long long)((int64_t)ts_us % 1000000), zone);
}

static const char *str_or(const cJSON *o, const char *k, const char *dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

static double num_or(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* One entry, a field a line, for people (`ledger get`). */
static void print_entry_text(const cJSON *e)
{
    char when[64];
    local_time(num_or(e, "ts", 0), when, sizeof(when));
    const cJSON *parent = cJSON_GetObjectItemCaseSensitive(e, "parent");
    printf("seq      %.0f\n", num_or(e, "seq", -1));
    printf("time     %s\n", when);
    printf("actor    %s\n", str_or(e, "actor", "?"));
    printf("kind     %s\n", str_or(e, "kind", "?"));
    if (cJSON_IsNumber(parent))
        printf("parent   %.0f\n", parent->valuedouble);
    else
        printf("parent   -\n");
    printf("hash     %s\n", str_or(e, "hash", "?"));
    printf("prev     %s\n", str_or(e, "prev", "?"));
    printf("payload  %s\n", str_or(e, "payload", "?"));
    if (str_or(e, "body", NULL))
        printf("body     %s\n", str_or(e, "body", ""));
}

/* A causal chain, root first, one line an entry (`ledger chain`). */
static void print_chain_text(const cJSON *entries)
{
    const cJSON *e;
    int depth = 0;
    cJSON_ArrayForEach (e, entries) {
        char when[64];
        local_time(num_or(e, "ts", 0), when, sizeof(when));
        printf("%*s%s%.0f  %s  %s  %s\n", depth * 2, "", depth ? "-> " : "",
               num_or(e, "seq", -1), str_or(e, "kind", "?"),
               str_or(e, "actor", "?"), when);
        depth++;
    }
}

/* Counts of an object {name: n}, "name n, name n". */
static void print_counts(const char *label, const cJSON *o)
{
    printf("%-10s", label);
    const cJSON *v;
    int any = 0;
    cJSON_ArrayForEach (v, o) {
        printf("%s%s %.0f", any++ ? ", " : " ", v->string, v->valuedouble);
    }
    printf("%s\n", any ? "" : " none");
}

/* `ledger summary` for people. */
static void print_summary_text(const cJSON *o)
{
    printf("ledger    %s (id %s)\n", str_or(o, "origin", "?"),
           str_or(o, "ledger_id", "?"));
    printf("entries   %.0f, head %.16s\n", num_or(o, "entries", 0),
           str_or(o, "head", "-"));
    printf("bodies    %.0f present, %.0f redacted\n",
           num_or(o, "bodies_present", 0), num_or(o, "bodies_redacted", 0));
    print_counts("by kind", cJSON_GetObjectItemCaseSensitive(o, "by_kind"));
    print_counts("by actor", cJSON_GetObjectItemCaseSensitive(o, "by_actor"));
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "runs");
    if (r)
        printf("runs      %.0f requests, %.0f plans, %.0f tasks; results %.0f "
               "ok, %.0f failed, %.0f redacted; %.0f refusals\n",
               num_or(r, "requests", 0), num_or(r, "plans", 0),
               num_or(r, "tasks", 0), num_or(r, "results_ok", 0),
               num_or(r, "results_failed", 0), num_or(r, "results_redacted", 0),
               num_or(r, "refusals", 0));
}

/* Served entries as the people's table (cli_tail.c). */
static void print_entries_table(struct ledger *l, const cJSON *entries)
{
    int n = cJSON_GetArraySize(entries);
    if (n <= 0)
        return;
    struct ledger_entry *v = calloc((size_t)n, sizeof(*v));
    if (!v)
        return;
    struct fo_err err;
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach (e, entries)
        if (ledger_entry_from_json(e, &v[k], &err) == FO_OK)
            k++;
    int w = cli_actor_width(v, (size_t)k);
    cli_entries_header(w < 16 ? 16 : w);
    for (int i = 0; i < k; i++)
        cli_entries_row(l, &v[i], w < 16 ? 16 : w);
    free(v);
}

static int cmd_show(struct cli *c, int argc, char **argv)
{
    long long limit = 20;
    const struct cli_opt opts[] = {
        {"--limit", "N", CLI_OPT_INT, &limit, 1, 1000, NULL, NULL,
         "the last N entries (default 20)"},
        CLI_OPT_END,
    };
    int ex = cli_parse(c, "ledger show", argc, argv, opts, NULL, 0, NULL);
    if (ex == CLI_PARSE_HELP)
        return cli_help(
            "usage: forum ledger show [--limit N]\n"
            "The last N entries (default 20, at most 1000): seq, local "
            "time, actor,\nkind, parent and a preview of the body "
            "(--json: the entries as served).\n"
            "example:\n  forum ledger show --limit 50\n");
    if (ex)
        return ex;
    struct ledger *l = NULL;
    ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (ex)
        return ex;
    int64_t count = 0;
    struct fo_err err;
    if (ledger_count(l, &count, &err) != FO_OK) {
        ex = cli_fail(c, &err);
        ledger_close(l);
        return ex;
    }
    cJSON *in = cJSON_CreateObject(), *out = NULL;
    fo_json_add_int(in, "from", count > limit ? count - limit : 0);
    fo_json_add_int(in, "limit", limit);
    ex = cli_call(c, l, "ledger_range", in, &out);
    if (!ex && c->json) {
        cli_print_json(out, 0);
    } else if (!ex) {
        print_entries_table(l,
                            cJSON_GetObjectItemCaseSensitive(out, "entries"));
        if (count == 0)
            printf("(empty ledger)\n");
    }
    cJSON_Delete(out);
    ledger_close(l);
    return ex;
}

static int cmd_replay(struct cli *c, int argc, char **argv)
{
    long long seq = -1, from = -1, limit = -1;
    const struct cli_opt opts[] = {
        {"--from", "N", CLI_OPT_INT, &from, 0, INT64_MAX, NULL, "not a seq",
         "the first entry of the page"},
        {"--limit", "N", CLI_OPT_INT, &limit, 1, 1000, NULL, NULL,
         "entries in the page"},
        CLI_OPT_END,
    };
    const char *pos[1];
    int npos = 0;
    int ex = cli_parse(c, "ledger replay", argc, argv, opts, pos, 1, &npos);
    if (ex == CLI_PARSE_HELP)
        return cli_help("usage: forum ledger replay SEQ [--from N] "
                        "[--limit N]\n"
                        "The ledger as it stood at SEQ: entries 0..SEQ, in "
                        "pages of at most 1000.\n"
                        "example:\n  forum ledger replay 120 --from 100\n");
    if (ex)
        return ex;
    if (npos && (seq = cli_parse_seq(pos[0])) < 0)
        return cli_bad_arg(c, "ledger replay", pos[0], NULL);
    if (seq < 0)
        return cli_usage_error(c, "replay: %s", "a SEQ is needed");
    struct ledger *l = NULL;
    ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (ex)
        return ex;
    cJSON *in = cJSON_CreateObject(), *out = NULL;
    fo_json_add_int(in, "seq", seq);
    if (from >= 0)
        fo_json_add_int(in, "from", from);
    if (limit > 0)
        fo_json_add_int(in, "limit", limit);
    ex = cli_call(c, l, "ledger_replay", in, &out);
    if (!ex && c->json) {
        cli_print_json(out, 0);
    } else if (!ex) {
        print_entries_table(l,
                            cJSON_GetObjectItemCaseSensitive(out, "entries"));
    }
    cJSON_Delete(out);
    ledger_close(l);
    return ex;
}

static void progress(void *ctx, int64_t done, int64_t total)
{
    (void)ctx;
    fprintf(stderr, "\rverifying: %lld / %lld entries (%d%%)", (long long)done,
            (long long)total, total ? (int)(done * 100 / total) : 100);
    if (done >= total)
        fputc('\n', stderr);
    fflush(stderr);
}

static int cmd_verify(struct cli *c, int argc, char **argv)
{
    int deep = 0;
    const char *cp_file = NULL, *vkey = NULL; /* --checkpoint (cli_proof.c) */
    const char *witness[64];                  /* --witness (cli_tiles.c) */
    int nw = 0;
    long long min_w = -1;
    const struct cli_opt opts[] = {
        {"--deep", NULL, CLI_OPT_BOOL, &deep, 0, 0, NULL, NULL,
         "also re-hash every stored body"},
        {"--checkpoint", "NOTE", CLI_OPT_STR, &cp_file, 0, 0, NULL, NULL,
         "also check the signed checkpoint NOTE"},
        {"--vkey", "KEY", CLI_OPT_STR, &vkey, 0, 0, NULL, NULL,
         "NOTE's verifier key (text or @FILE)"},
        {"--witness", "WKEY", CLI_OPT_LIST, witness, 0,
         (long long)(sizeof(witness) / sizeof(witness[0])), &nw, NULL,
         "a witness that must have cosigned NOTE (repeat)"},
        {"--min-witnesses", "K", CLI_OPT_INT, &min_w, 0, 64, NULL, NULL,
         "at least K of them (default: all)"},
        CLI_OPT_END,
    };
    int ex = cli_parse(c, "ledger verify", argc, argv, opts, NULL, 0, NULL);
    if (ex == CLI_PARSE_HELP)
        return cli_help(
            "usage: forum ledger verify [--deep] [--checkpoint NOTE "
            "--vkey KEY\n"
            "                           [--witness WKEY ... "
            "[--min-witnesses K]]]\n"
            "With --checkpoint: also checks the signed checkpoint NOTE "
            "with KEY\n(the key text or @FILE) and that the log's root "
            "at its size matches\n(reasons: docs/LEDGER.md). "
            "--witness names a witness (its verifier\nkey, text or "
            "@FILE); at least K of them (default: all) must have\n"
            "cosigned NOTE, else exit 1 with reason witnesses.\n"
            "Walks the whole ledger: seq continuity, prev links, entry\n"
            "hashes, parents, timestamps and the Merkle tree; --deep "
            "also\nre-hashes every stored body. Exit 0 when it "
            "verifies, 1 when\nit does not (the output says where it "
            "breaks), 3 on I/O errors.\n"
            "examples:\n  forum ledger verify --deep\n"
            "  forum ledger verify --checkpoint cp.note --vkey "
            "@checkpoint.vkey\n");
    if (ex)
        return ex;
    int min = (int)min_w;
    if ((nw || min >= 0) && !cp_file)
        return cli_usage_error(c, "verify: --witness needs --checkpoint");
    if (min > nw || (min >= 0 && nw == 0))
        return cli_usage_error(c, "verify: --min-witnesses %d of %d named", min,
                               nw);
    if (cp_file || vkey) { /* proofs and checkpoints: cli_proof.c */
        if (!cp_file || !vkey)
            return cli_usage_error(c, "verify: %s",
                                   "--checkpoint and --vkey go together");
        if (nw) { /* witnesses first: cli_tiles.c */
            ex = cli_witness_check(c, cp_file, witness, nw, min < 0 ? nw : min);
            if (ex)
                return ex;
        }
        return cli_verify_checkpoint(c, deep, cp_file, vkey);
    }
    struct ledger *l = NULL;
    ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (ex)
        return ex;
    struct ledger_verify_result res;
    struct fo_err err;
    fo_err_clear(&err);
    int tty = isatty(2);
    int rc = ledger_verify(l, deep ? LEDGER_VERIFY_DEEP : 0,
                           tty ? progress : NULL, NULL, &res, &err);
    ledger_close(l);
    if (rc)
        return cli_fail(c, &err);
    cJSON *out = ledger_verify_json(&res);
    if (c->json) {
        cli_print_json(out, 0);
    } else if (res.ok) {
        printf("ok: %lld entries verified (chain and tree",
               (long long)res.entries);
        if (deep)
            printf("; %lld bodies checked, %lld redacted",
                   (long long)res.bodies_checked,
                   (long long)res.bodies_redacted);
        printf(")\n");
    } else if (!res.chain) {
        printf("FAILED: entry %lld: %s (%lld entries verified before it)\n",
               (long long)res.first_bad_seq, res.reason,
               (long long)res.entries);
    } else {
        printf("FAILED: the chain verifies, but %lld bodies do not match "
               "their payload hash (first: entry %lld)\n",
               (long long)res.bodies_bad, (long long)res.first_bad_body_seq);
    }
    cJSON_Delete(out);
    return res.ok ? 0 : 1;
}

static int cmd_redact(struct cli *c, int argc, char **argv)
{
    long long seq = -1;
    const char *reason = NULL, *pos = NULL;
    const struct cli_opt opts[] = {
        {"--reason", "R", CLI_OPT_STR, &reason, 0, 0, NULL, NULL,
         "why (kept in the redaction entry)"},
        CLI_OPT_END,
    };
    int pe = cli_parse(c, "ledger redact", argc, argv, opts, &pos, 1, NULL);
    if (pe == CLI_PARSE_HELP)
        return cli_help("usage: forum ledger redact SEQ --reason R\n"
                        "Deletes every stored copy of the entry's body; the"
                        " chain and every\ncheckpoint still verify. "
                        "Witnessed as a `redaction` entry.\n"
                        "example:\n  forum ledger redact 42 --reason "
                        "\"leaked a customer email\"\n");
    if (pe)
        return pe;
    if (pos && (seq = cli_parse_seq(pos)) < 0)
        return cli_bad_arg(c, "ledger redact", pos, NULL);
    if (seq < 0 || !reason)
        return cli_usage_error(c, "redact: %s",
                               "SEQ and --reason are required");
    struct ledger *l = NULL;
    int ex = cli_open(c, 0, &l);
    if (ex)
        return ex;
    cJSON *in = cJSON_CreateObject(), *out = NULL;
    fo_json_add_int(in, "seq", seq);
    cJSON_AddStringToObject(in, "reason", reason);
    ex = cli_call(c, l, "ledger_redact", in, &out);
    if (!ex && c->json)
        cli_print_json(out, 0);
    else if (!ex)
        printf("redacted the body of entry %lld (witnessed as entry %.0f)\n",
               seq, cJSON_GetObjectItemCaseSensitive(out, "seq")->valuedouble);
    if (!ex &&
        cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(out, "wal_truncated")))
        fprintf(stderr,
                "forum: note: a reader held an old snapshot, so the deleted "
                "bytes may stay in ledger.db-wal until the next redaction or "
                "restart\n");
    cJSON_Delete(out);
    ledger_close(l);
    return ex;
}

static int cmd_noarg(struct cli *c, int argc, char **argv, const char *method,
                     const char *usage)
{
    const struct cli_opt opts[] = {CLI_OPT_END};
    int pe = cli_parse(c, cmd_name(argv[0]), argc, argv, opts, NULL, 0, NULL);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(usage) : pe;
    struct ledger *l = NULL;
    int ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (ex)
        return ex;
    cJSON *out = NULL;
    ex = cli_call(c, l, method, NULL, &out);
    if (!ex && !c->json && !strcmp(method, "ledger_summary"))
        print_summary_text(out);
    else if (!ex)
        cli_print_json(out, !c->json);
    cJSON_Delete(out);
    ledger_close(l);
    return ex;
}

int cli_ledger(struct cli *c, int argc, char **argv)
{
    if (argc < 2 || cli_is_help(argv[1])) {
        fputs(ledger_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    argc--;
    argv++;
    if (!strcmp(cmd, "init"))
        return cmd_init(c, argc, argv);
    if (!strcmp(cmd, "append"))
        return cmd_append(c, argc, argv);
    if (!strcmp(cmd, "get"))
        return cmd_seq(c, argc, argv, "ledger_get",
                       "usage: forum ledger get SEQ\nOne entry: the 8 "
                       "hashed fields, its hash, and whether its body is "
                       "present or redacted.\n"
                       "example:\n  forum --json ledger get 42\n");
    if (!strcmp(cmd, "body"))
        return cmd_seq(c, argc, argv, "ledger_body",
                       "usage: forum ledger body SEQ\nThe JSON body of an "
                       "entry (exit 1 with code `redacted` when it was "
                       "redacted).\n"
                       "example:\n  forum ledger body 42\n");
    if (!strcmp(cmd, "chain"))
        return cmd_seq(c, argc, argv, "ledger_chain",
                       "usage: forum ledger chain SEQ\nThe causal chain of "
                       "an entry: its parent links to the root, root "
                       "first.\n"
                       "example:\n  forum ledger chain 42\n");
    if (!strcmp(cmd, "show"))
        return cmd_show(c, argc, argv);
    if (!strcmp(cmd, "replay"))
        return cmd_replay(c, argc, argv);
    if (!strcmp(cmd, "tail")) /* cli_tail.c */
        return cli_ledger_tail(c, argc, argv);
    if (!strcmp(cmd, "verify"))
        return cmd_verify(c, argc, argv);
    if (!strcmp(cmd, "redact"))
        return cmd_redact(c, argc, argv);
    /* proofs and checkpoints: cli_proof.c */
    if (!strcmp(cmd, "checkpoint"))
        return cli_ledger_checkpoint(c, argc, argv);
    if (!strcmp(cmd, "tiles")) /* static tiles, witnesses: cli_tiles.c */
        return cli_ledger_tiles(c, argc, argv);
    if (!strcmp(cmd, "cosign"))
        return cli_ledger_cosign(c, argc, argv);
    if (!strcmp(cmd, "witness"))
        return cli_ledger_witness(c, argc, argv);
    if (!strcmp(cmd, "prove"))
        return cli_ledger_prove(c, argc, argv);
    if (!strcmp(cmd, "consistency"))
        return cli_ledger_consistency(c, argc, argv);
    if (!strcmp(cmd, "key"))
        return cli_ledger_key(c, argc, argv);
    if (!strcmp(cmd, "bundle"))
        return cli_ledger_bundle(c, argc, argv);
    if (!strcmp(cmd, "backup")) /* cli_backup.c */
        return cli_ledger_backup(c, argc, argv);
    if (!strcmp(cmd, "restore"))
        return cli_ledger_restore(c, argc, argv);
    if (!strcmp(cmd, "export")) /* cli_export.c */
        return cli_ledger_export(c, argc, argv);
    if (!strcmp(cmd, "import"))
        return cli_ledger_import(c, argc, argv);
    if (!strcmp(cmd, "migrate")) /* cli_migrate.c */
        return cli_ledger_migrate(c, argc, argv);
    if (!strcmp(cmd, "capsule")) /* cli_ref.c */
        return cli_ledger_capsule(c, argc, argv);
    if (!strcmp(cmd, "room"))
        return cli_ledger_room(c, argc, argv);
    if (!strcmp(cmd, "summary"))
        return cmd_noarg(c, argc, argv, "ledger_summary",
                         "usage: forum ledger summary\nEntry count, counts "
                         "by kind and by actor, head hash, bodies present "
                         "and redacted.\n"
                         "example:\n  forum --json ledger summary\n");
    static const char *const subs[] = {
        "init",    "append",  "get",         "body",       "chain",  "show",
        "replay",  "verify",  "redact",      "checkpoint", "tiles",  "cosign",
        "witness", "prove",   "consistency", "key",        "bundle", "backup",
        "restore", "summary", "export",      "import",     "tail",   "migrate",
        "capsule", "room"};
    const char *near = cli_closest(cmd, subs, sizeof(subs) / sizeof(subs[0]));
    if (near)
        return cli_usage_error(c,
                               "ledger: unknown command %s; did you mean "
                               "`forum ledger %s`?",
                               cmd, near);
    return cli_usage_error(c, "ledger: unknown command %s", cmd);
}
