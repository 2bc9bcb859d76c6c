/* cli_export: `forum ledger export` (the log as JSONL: every entry with its
 * body, as the ledger recorded them) and `forum ledger import` (such a
 * file made into a fresh ledger whose entries come out with the same
 * hashes, checked one by one, or nothing is written). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_opt.h"
#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "ledger/proof.h"

#define IMPORT_BATCH 2048
#define LINE_MAX_BYTES (8u * 1024u * 1024u)

static const char export_usage[] =
    "usage: forum ledger export [-o FILE] [--from N] [--to N]\n"
    "Writes the log as JSON lines: a header {\"forum_export\": 1, \"origin\",\n"
    "\"ledger_id\", \"from\", \"count\"}, then for each entry {\"entry\": the\n"
    "entry with its hash, \"body\": its body} ({\"redacted\": true} instead "
    "of\n"
    "a body that was redacted), then {\"end\": true, \"count\", \"root\"} "
    "(the\n"
    "tree root at --to, when the export starts at 0). `forum ledger import`\n"
    "makes it a ledger again with the same hashes.\n"
    "  -o FILE     write to FILE (default: stdout)\n"
    "  --from N    the first seq (default 0)\n"
    "  --to N      entries below N (default: all)\n"
    "example:\n"
    "  forum ledger export -o forum.jsonl\n"
    "exit codes: 0 written; 2 usage; 3 I/O\n";

static const char import_usage[] =
    "usage: forum ledger import FILE|-\n"
    "Makes a `forum ledger export` file the data dir's ledger, which must\n"
    "not exist yet (it is created with the export's origin). Each entry is\n"
    "appended with its recorded time, and must come out with its recorded\n"
    "hash (so the chain, every body and the tree are checked as they go\n"
    "in); the tree root at the end must be the export's. On any failure\n"
    "nothing is left behind.\n"
    "example:\n"
    "  forum --ledger ./copy ledger import forum.jsonl\n"
    "exit codes: 0 imported; 1 an entry or the root does not match (the\n"
    "file was changed); 2 usage, a malformed line (named), a ledger is\n"
    "already there; 3 I/O\n";

struct export_ctx {
    struct ledger *l;
    FILE *out;
    int64_t n;
    struct fo_buf line;
    struct fo_err *err;
};

/* One entry line, its body with it (NULL: redacted). */
static int export_one(void *arg, const struct ledger_entry *e, const char *body,
                      size_t len)
{
    struct export_ctx *x = arg;
    fo_buf_reset(&x->line);
    int w = fo_buf_puts(&x->line, "{\"entry\":") ||
            ledger_entry_text(e, &x->line) ||
            (!body ? fo_buf_puts(&x->line, ",\"redacted\":true}\n")
                   : (fo_buf_puts(&x->line, ",\"body\":") ||
                      fo_buf_append(&x->line, body, len) ||
                      fo_buf_puts(&x->line, "}\n")));
    if (w)
        return fo_err_set(x->err, FO_E_NOMEM, NULL);
    if (fwrite(x->line.data, 1, x->line.len, x->out) != x->line.len)
        return fo_err_set(x->err, FO_E_IO, "cannot write the export: %s",
                          strerror(errno));
    x->n++;
    return FO_OK;
}

int cli_ledger_export(struct cli *c, int argc, char **argv)
{
    const char *file = NULL;
    long long from = 0, to = -1;
    const struct cli_opt opts[] = {
        {"-o", "FILE", CLI_OPT_STR, &file, 0, 0, NULL, NULL,
         "write to FILE (default: stdout)"},
        {"--from", "N", CLI_OPT_INT, &from, 0, INT64_MAX, NULL, "not a seq",
         "the first seq (default 0)"},
        {"--to", "N", CLI_OPT_INT, &to, 0, INT64_MAX, NULL, "not a seq",
         "entries below N (default: all)"},
        CLI_OPT_END,
    };
    int ex = cli_parse(c, "ledger export", argc, argv, opts, NULL, 0, NULL);
    if (ex)
        return ex == CLI_PARSE_HELP ? cli_help(export_usage) : ex;
    struct ledger *l = NULL;
    struct fo_err err;
    fo_err_clear(&err);
    int rc = ledger_open(c->ledger_dir, LEDGER_OPEN_READONLY, NULL, &l, &err);
    if (rc)
        return cli_fail(c, &err);
    int64_t count = 0;
    rc = ledger_count(l, &count, &err);
    if (!rc && (to < 0 || to > count))
        to = count;
    if (!rc && from > to)
        rc = fo_err_set(&err, FO_E_INVALID,
                        "export: --from %lld is past "
                        "--to %lld",
                        from, to);
    FILE *out = stdout;
    if (!rc && file) { /* the ledger's contents: 0600, as its own files */
        int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || !(out = fdopen(fd, "w"))) {
            if (fd >= 0)
                close(fd);
            out = stdout;
            rc = fo_err_set(&err, FO_E_IO, "%s: %s", file, strerror(errno));
        }
    }
    struct export_ctx x = {.l = l, .out = out, .err = &err};
    fo_buf_init(&x.line, FO_BUF_UNLIMITED);
    if (!rc) {
        cJSON *h = cJSON_CreateObject();
        if (!h || !fo_json_add_int(h, "forum_export", 1) ||
            !cJSON_AddStringToObject(h, "origin", ledger_origin(l)) ||
            !cJSON_AddStringToObject(h, "ledger_id", ledger_id(l)) ||
            !fo_json_add_int(h, "from", from) ||
            !fo_json_add_int(h, "count", to - from))
            rc = fo_err_set(&err, FO_E_NOMEM, NULL);
        struct fo_buf hb;
        fo_buf_init(&hb, FO_BUF_UNLIMITED);
        if (!rc && !(rc = fo_json_canon(h, &hb, &err)))
            fprintf(out, "%s\n", hb.data);
        fo_buf_release(&hb);
        cJSON_Delete(h);
    }
    /* 2,048 entries with their bodies a read (one round trip each on
     * PostgreSQL), never the whole ledger in memory */
    for (int64_t at = from; !rc && at < to; at += IMPORT_BATCH)
        rc = ledger_range_bodies(
            l, at, to - at < IMPORT_BATCH ? to - at : IMPORT_BATCH, export_one,
            &x, &err);
    if (!rc) {
        uint8_t root[32];
        char hex[65];
        if (from == 0 && !(rc = ledger_root(l, to, root, &err))) {
            fo_hex(root, 32, hex);
            fprintf(out, "{\"count\":%lld,\"end\":true,\"root\":\"%s\"}\n",
                    (long long)x.n, hex);
        } else if (!rc) {
            fprintf(out, "{\"count\":%lld,\"end\":true}\n", (long long)x.n);
        }
    }
    fo_buf_release(&x.line);
    if (out != stdout && fclose(out) != 0 && !rc)
        rc = fo_err_set(&err, FO_E_IO, "%s: %s", file, strerror(errno));
    ledger_close(l);
    if (rc)
        return cli_fail(c, &err);
    if (file)
        fprintf(stderr, "forum: exported %lld entries to %s\n", (long long)x.n,
                file);
    return 0;
}

/* ---- import
 * ------------------------------------------------------------------ */

struct pending {
    struct ledger_append req[IMPORT_BATCH];
    struct ledger_entry ent[IMPORT_BATCH];
    char *bodies[IMPORT_BATCH];
    size_t n;
};

static void pending_clear(struct pending *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->bodies[i]);
    p->n = 0;
}

static int flush(struct ledger *l, struct pending *p, struct fo_err *err)
{
    int rc = cli_append_all(l, p->req, p->n, err);
    pending_clear(p);
    return rc;
}

/* The ledger an import writes into must be empty (a PostgreSQL one is made
 * by `init --postgres` before): then one transaction holds the whole
 * import where the store can (ledger_hold). */
static int import_into(struct cli *c, struct ledger *l, struct fo_err *err)
{
    int64_t n = 0;
    int rc = ledger_count(l, &n, err);
    if (!rc && n > 0)
        rc = fo_err_set(err, FO_E_EXISTS,
                        "import: %s already holds %lld entries; import into "
                        "an empty ledger",
                        c->ledger_dir, (long long)n);
    return rc ? rc : ledger_hold(l, 1, 0, err);
}

/* One entry line into p (taken over by it). */
static int entry_line(const cJSON *j, long long lineno, struct pending *p,
                      struct fo_err *err)
{
    const cJSON *ej = cJSON_GetObjectItemCaseSensitive(j, "entry");
    const cJSON *body = cJSON_GetObjectItemCaseSensitive(j, "body");
    int redacted =
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "redacted"));
    struct ledger_entry *e = &p->ent[p->n];
    struct fo_err perr;
    if (!cJSON_IsObject(ej) || (!body && !redacted) ||
        ledger_entry_from_json(ej, e, &perr) != FO_OK)
        return fo_err_set(err, FO_E_INVALID,
                          "line %lld: not an entry line ({\"entry\": {...}, "
                          "\"body\": ...})%s%s",
                          lineno, ej ? ": " : "", ej ? perr.msg : "");
    char *text = NULL;
    size_t len = 0;
    if (body) {
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        int rc = fo_json_canon(body, &b, err);
        text = rc ? NULL : fo_buf_detach(&b, &len);
        fo_buf_release(&b);
        if (!text)
            return rc ? rc : fo_err_set(err, FO_E_NOMEM, NULL);
    }
    p->bodies[p->n] = text;
    p->req[p->n] = (struct ledger_append){.actor = e->actor,
                                          .kind = e->kind,
                                          .parent = e->parent,
                                          .body = text,
                                          .body_len = len,
                                          .import = e};
    p->n++;
    return FO_OK;
}

int cli_ledger_import(struct cli *c, int argc, char **argv)
{
    const char *file = NULL;
    const struct cli_opt opts[] = {CLI_OPT_END};
    int ex = cli_parse(c, "ledger import", argc, argv, opts, &file, 1, NULL);
    if (ex)
        return ex == CLI_PARSE_HELP ? cli_help(import_usage) : ex;
    if (!file)
        return cli_usage_error(c, "import: FILE is required (- for stdin)");
    char db[4096];
    snprintf(db, sizeof(db), "%s/ledger.db", c->ledger_dir);
    if (access(db, F_OK) == 0)
        return cli_usage_error(c,
                               "import: %s already holds a ledger; import "
                               "into a new data dir (--ledger DIR)",
                               c->ledger_dir);
    FILE *in = strcmp(file, "-") ? fopen(file, "r") : stdin;
    struct fo_err err;
    fo_err_clear(&err);
    if (!in) {
        err.code = errno == ENOENT ? FO_E_NOT_FOUND : FO_E_IO;
        fo_err_set(&err, err.code, "%s: %s", file, strerror(errno));
        return cli_fail(c, &err);
    }
    struct pending *p = calloc(1, sizeof(*p));
    struct ledger *l = NULL;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long long lineno = 0, entries = 0, want_count = -1;
    int rc = p ? FO_OK : fo_err_set(&err, FO_E_NOMEM, NULL), ended = 0;
    int held = 0; /* a ledger_hold is open */
    char want_root[65] = "";
    int tty = isatty(2);
    while (!rc && (n = getline(&line, &cap, in)) > 0) {
        lineno++;
        if ((size_t)n > LINE_MAX_BYTES) {
            rc = fo_err_set(&err, FO_E_INVALID, "line %lld: over %u bytes",
                            lineno, LINE_MAX_BYTES);
            break;
        }
        cJSON *j = NULL;
        struct fo_err perr;
        if (fo_json_parse(line, (size_t)n - (line[n - 1] == '\n'), &j, &perr) !=
                FO_OK ||
            !cJSON_IsObject(j)) {
            cJSON_Delete(j);
            rc = fo_err_set(&err, FO_E_INVALID,
                            "line %lld: not a JSON object%s%s", lineno,
                            j ? "" : ": ", j ? "" : perr.msg);
            break;
        }
        if (ended) {
            rc = fo_err_set(&err, FO_E_INVALID, "line %lld: after the end line",
                            lineno);
        } else if (lineno == 1) {
            const cJSON *o = cJSON_GetObjectItemCaseSensitive(j, "origin");
            long long from = -1;
            if (fo_json_get_int(j, "forum_export", 1, 1, &from) != FO_OK ||
                !cJSON_IsString(o) ||
                fo_json_get_int(j, "from", 0, INT64_MAX, &from) != FO_OK)
                rc = fo_err_set(&err, FO_E_INVALID,
                                "line 1: not a forum export header "
                                "({\"forum_export\": 1, \"origin\", ...})");
            else if (from != 0)
                rc = fo_err_set(&err, FO_E_INVALID,
                                "line 1: the export starts at seq %lld; a "
                                "ledger can only be made from one that "
                                "starts at 0",
                                from);
            else {
                struct ledger_config cfg = {.origin = o->valuestring};
                rc = ledger_open(c->ledger_dir, LEDGER_OPEN_CREATE, &cfg, &l,
                                 &err);
                rc = rc ? rc : import_into(c, l, &err);
                held = !rc;
            }
        } else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "end"))) {
            const cJSON *root = cJSON_GetObjectItemCaseSensitive(j, "root");
            ended = 1;
            if (fo_json_get_int(j, "count", 0, INT64_MAX, &want_count) != FO_OK)
                rc = fo_err_set(&err, FO_E_INVALID,
                                "line %lld: the end line has no count", lineno);
            if (cJSON_IsString(root))
                snprintf(want_root, sizeof(want_root), "%s", root->valuestring);
        } else {
            rc = entry_line(j, lineno, p, &err);
            entries += rc ? 0 : 1;
            if (!rc && p->n == IMPORT_BATCH)
                rc = flush(l, p, &err);
            if (!rc && tty && entries % 100000 == 0)
                fprintf(stderr, "\rforum: imported %lld entries", entries);
        }
        cJSON_Delete(j);
    }
    if (!rc && ferror(in))
        rc = fo_err_set(&err, FO_E_IO, "%s: read error", file);
    if (!rc && !l)
        rc = fo_err_set(&err, FO_E_INVALID, "%s: empty (no header line)", file);
    if (!rc)
        rc = flush(l, p, &err);
    if (!rc && !ended)
        rc = fo_err_set(&err, FO_E_INVALID,
                        "%s: no end line after line %lld (a cut file?)", file,
                        lineno);
    if (!rc && want_count != entries)
        rc = fo_err_set(&err, FO_E_CORRUPT,
                        "the end line counts %lld entries, the file holds "
                        "%lld",
                        want_count, entries);
    if (!rc && want_root[0]) {
        uint8_t root[32];
        char hex[65];
        rc = ledger_root(l, entries, root, &err);
        if (!rc) {
            fo_hex(root, 32, hex);
            if (strcmp(hex, want_root))
                rc = fo_err_set(&err, FO_E_CORRUPT,
                                "the tree root is %s, the export says %s", hex,
                                want_root);
        }
    }
    if (held && rc) /* PostgreSQL: all of it, or none */
        ledger_hold(l, 0, 0, NULL);
    else if (held)
        rc = ledger_hold(l, 0, 1, &err);
    if (tty && entries >= 100000)
        fprintf(stderr, "\n");
    if (p)
        pending_clear(p);
    free(p);
    free(line);
    if (in != stdin)
        fclose(in);
    if (l)
        ledger_close(l);
    if (rc) {
        if (l)
            cli_remove_sqlite(c->ledger_dir);
        int code = cli_fail(c, &err);
        return rc == FO_E_CORRUPT ? 1 : code;
    }
    if (c->json) {
        printf("{\"imported\":%lld,\"root\":\"%s\"}\n", entries, want_root);
    } else {
        printf("imported %lld entries into %s; the hashes and the tree root "
               "match the export\n",
               entries, c->ledger_dir);
    }
    return 0;
}
