/* cli_import: `forum import otel|langsmith|jsonl FILE` (an external trace
 * witnessed in one batch, through the ledger_import method) and `forum
 * export otel RUN` (a run as an OTLP/JSON trace, run_export_otel). See
 * docs/IMPORT.md. */
#include "cli/cli.h"
#include "cli/cli_opt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/import.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"

static const char import_usage[] =
    "usage: forum import otel|langsmith|jsonl FILE|- [--name NAME]\n"
    "Witnesses an external trace in the ledger, all in one transaction:\n"
    "first an `import` entry (the file's SHA-256, format and counts), then\n"
    "one entry per span, run or event, parents before children, each under\n"
    "its parent's entry (a root, or a record whose parent is not in the\n"
    "file, under the import entry; the latter are listed as dangling).\n"
    "Kinds: span, llm_call, tool_call, retrieval, event. Nothing is\n"
    "written when anything is wrong (docs/IMPORT.md).\n"
    "  otel       OTLP/JSON: {\"resourceSpans\": [...]}; GenAI attributes\n"
    "             and events lifted to model, tokens, prompt, completion\n"
    "  langsmith  LangSmith runs: a JSON array, {\"runs\": [...]}, or one\n"
    "             run a line\n"
    "  jsonl      one event a line: {\"id\", \"parent\"?, \"kind\"?, "
    "\"actor\"?,\n"
    "             \"ts\"?, ...}\n"
    "  --name NAME  the source's name kept in the import entry (default: the\n"
    "               file's name)\n"
    "Limits: 64 MiB of source, 4095 records, each entry's body within the\n"
    "ledger's body limit (1 MiB).\n"
    "examples:\n"
    "  forum import otel trace.json\n"
    "  forum --json import langsmith runs.jsonl\n"
    "exit codes: 0 imported; 2 bad input (malformed JSON with its byte or\n"
    "line, wrong format, duplicate id, cycle, over a limit); 3 I/O\n";

static const char export_usage[] =
    "usage: forum export otel RUN|session:NAME [-o FILE]\n"
    "Writes run RUN (its request entry and every descendant) as an\n"
    "OTLP/JSON trace that any OpenTelemetry backend opens: one span per\n"
    "entry, named by its kind, with forum.seq, forum.kind, forum.actor,\n"
    "forum.hash and forum.body attributes; traceId from the ledger id and\n"
    "the run, spanId from the entry hash, parentSpanId from its parent's.\n"
    "`forum import otel` reads it back. session:NAME writes a model\n"
    "gateway session instead (gateway_session_otel): one span per call,\n"
    "with gen_ai.request.model, gen_ai.usage.input_tokens and\n"
    "output_tokens, error.type.\n"
    "  -o FILE   write to FILE (default: stdout)\n"
    "example:\n"
    "  forum export otel 12 -o run-12.json\n"
    "  forum export otel session:my-task-42 -o session.json\n"
    "exit codes: 0 written; 1 no such run or session; 2 usage; 3 I/O\n";

/* The whole of path (- for stdin), at most IMPORT_MAX_BYTES. */
static int read_source(const char *path, struct fo_buf *out, struct fo_err *err)
{
    int std = !strcmp(path, "-");
    FILE *f = std ? stdin : fopen(path, "rb");
    if (!f)
        return fo_err_set(err, errno == ENOENT ? FO_E_INVALID : FO_E_IO,
                          "%s: %s", path, strerror(errno));
    struct stat st;
    int rc = FO_OK;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) &&
        (unsigned long long)st.st_size > IMPORT_MAX_BYTES)
        rc = fo_err_set(err, FO_E_TOO_LARGE,
                        "%s: %lld bytes; the limit is %u (64 MiB)", path,
                        (long long)st.st_size, IMPORT_MAX_BYTES);
    fo_buf_init(out, IMPORT_MAX_BYTES);
    char chunk[65536];
    size_t n;
    while (!rc && (n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        rc = fo_buf_append(out, chunk, n);
        if (rc == FO_E_TOO_LARGE)
            rc = fo_err_set(err, FO_E_TOO_LARGE,
                            "%s: over %u bytes (64 MiB), the limit", path,
                            IMPORT_MAX_BYTES);
        else if (rc)
            rc = fo_err_set(err, rc, NULL);
    }
    if (!rc && ferror(f))
        rc = fo_err_set(err, FO_E_IO, "%s: read error", path);
    if (!std)
        fclose(f);
    /* a NUL cannot travel in a JSON string, nor is it JSON text */
    const char *nul = rc || !out->data ? NULL : memchr(out->data, 0, out->len);
    if (nul)
        rc = fo_err_set(err, FO_E_JSON,
                        "%s: invalid JSON at byte %zu: a NUL "
                        "byte",
                        path, (size_t)(nul - out->data));
    if (!rc && out->len == 0)
        rc = fo_err_set(err, FO_E_INVALID, "%s: empty", path);
    if (rc)
        fo_buf_release(out);
    return rc;
}

static void print_import(const cJSON *o)
{
    printf("imported %lld %s record%s from %s (sha256 %.16s...)\n",
           cli_int_or(o, "records", 0), cli_str_or(o, "format", "?"),
           cli_int_or(o, "records", 0) == 1 ? "" : "s",
           cli_str_or(o, "name", "the source"), cli_str_or(o, "sha256", "?"));
    printf("  import entry %lld; entries %lld..%lld; %lld root%s\n",
           cli_int_or(o, "import_seq", -1), cli_int_or(o, "first_seq", -1),
           cli_int_or(o, "last_seq", -1), cli_int_or(o, "roots", 0),
           cli_int_or(o, "roots", 0) == 1 ? "" : "s");
    const cJSON *k;
    printf("  kinds:");
    cJSON_ArrayForEach (k, cJSON_GetObjectItemCaseSensitive(o, "by_kind"))
        printf(" %s %.0f", k->string, k->valuedouble);
    printf("\n");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "dangling");
    if (cJSON_GetArraySize(d) > 0)
        printf("  %d dangling (parent not in the file; attached to the "
               "import entry):\n",
               cJSON_GetArraySize(d));
    cJSON_ArrayForEach (k, d)
        printf("    %s (parent %s) -> entry %lld\n", cli_str_or(k, "id", "?"),
               cli_str_or(k, "parent_id", "?"), cli_int_or(k, "seq", -1));
}

int cli_import(struct cli *c, int argc, char **argv)
{
    const char *format = NULL, *file = NULL, *name = NULL, *pos[2];
    const struct cli_opt opts[] = {
        {"--name", "NAME", CLI_OPT_STR, &name, 0, 0, NULL, NULL,
         "the source's name kept in the import entry (default: the file's)"},
        CLI_OPT_END,
    };
    int npos = 0;
    int pe = cli_parse(c, "import", argc, argv, opts, pos, 2, &npos);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(import_usage) : pe;
    format = npos > 0 ? pos[0] : NULL;
    file = npos > 1 ? pos[1] : NULL;
    if (!format || !file)
        return cli_usage_error(c, "import: a format (otel, langsmith, "
                                  "jsonl) and a FILE are required");
    if (!import_format_known(format)) {
        static const char *const names[] = {"otel", "langsmith", "jsonl"};
        const char *near = cli_closest(format, names, 3);
        return cli_usage_error(c,
                               "import: %s is not a format (otel, langsmith, "
                               "jsonl)%s%s%s",
                               format, near ? "; did you mean " : "",
                               near ? near : "", near ? "?" : "");
    }
    if (!name && strcmp(file, "-")) {
        const char *slash = strrchr(file, '/');
        name = slash ? slash + 1 : file;
    }
    struct fo_err err;
    fo_err_clear(&err);
    struct fo_buf data;
    if (read_source(file, &data, &err))
        return cli_fail(c, &err);
    struct ledger *l = NULL;
    int ex = cli_open(c, LEDGER_OPEN_CREATE, &l);
    if (ex) {
        fo_buf_release(&data);
        return ex;
    }
    cJSON *in = cJSON_CreateObject(), *out = NULL;
    int ok = in && cJSON_AddStringToObject(in, "format", format) &&
             cJSON_AddStringToObject(in, "data", data.data) &&
             (!name || !*name || cJSON_AddStringToObject(in, "name", name));
    fo_buf_release(&data);
    if (!ok) {
        cJSON_Delete(in);
        ledger_close(l);
        fo_err_set(&err, FO_E_NOMEM, NULL);
        return cli_fail(c, &err);
    }
    int rc = cli_call_err(l, "ledger_import", in, &out, &err);
    ledger_close(l);
    if (rc) {
        /* the source's problems name the file; the ledger's do not */
        if (rc == FO_E_JSON || rc == FO_E_INVALID || rc == FO_E_TOO_LARGE)
            fo_err_prefix(&err, "%s", file);
        return cli_fail(c, &err);
    }
    if (c->json)
        cli_print_json(out, 0);
    else
        print_import(out);
    cJSON_Delete(out);
    return 0;
}

int cli_export(struct cli *c, int argc, char **argv)
{
    const char *format = NULL, *file = NULL, *pos[2];
    long long run = -1;
    const struct cli_opt opts[] = {
        {"-o", "FILE", CLI_OPT_STR, &file, 0, 0, NULL, NULL,
         "write to FILE (default: stdout)"},
        CLI_OPT_END,
    };
    int npos = 0;
    int pe = cli_parse(c, "export", argc, argv, opts, pos, 2, &npos);
    if (pe)
        return pe == CLI_PARSE_HELP ? cli_help(export_usage) : pe;
    format = npos > 0 ? pos[0] : NULL;
    const char *sess = npos > 1 && !strncmp(pos[1], "session:", 8) && pos[1][8]
                           ? pos[1] + 8
                           : NULL;
    if (npos > 1 && !sess && (run = cli_parse_seq(pos[1])) < 0)
        return cli_usage_error(c, "export: %s: not a run id", pos[1]);
    if (!format || (run < 0 && !sess))
        return cli_usage_error(c, "export: a format (otel) and a RUN (or "
                                  "session:NAME) are required");
    if (strcmp(format, "otel"))
        return cli_usage_error(c, "export: %s is not a format (otel)", format);
    struct ledger *l = NULL;
    int ex = cli_open(c, LEDGER_OPEN_READONLY, &l);
    if (ex)
        return ex;
    cJSON *in = cJSON_CreateObject(), *out = NULL;
    if (sess)
        cJSON_AddStringToObject(in, "session", sess);
    else
        fo_json_add_int(in, "run", run);
    ex = cli_call(c, l, sess ? "gateway_session_otel" : "run_export_otel", in,
                  &out);
    ledger_close(l);
    if (ex)
        return ex;
    if (!file) {
        cli_print_json(out, !c->json);
        cJSON_Delete(out);
        return 0;
    }
    struct fo_err err;
    fo_err_clear(&err);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = fo_json_canon(out, &b, &err);
    FILE *f = rc ? NULL : fopen(file, "wb");
    if (!rc && !f)
        rc = fo_err_set(&err, FO_E_IO, "%s: %s", file, strerror(errno));
    if (f && (fwrite(b.data, 1, b.len, f) != b.len || fputc('\n', f) == EOF))
        rc = fo_err_set(&err, FO_E_IO, "%s: %s", file, strerror(errno));
    if (f && fclose(f) && !rc)
        rc = fo_err_set(&err, FO_E_IO, "%s: %s", file, strerror(errno));
    fo_buf_release(&b);
    const cJSON *spans = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(
            cJSON_GetObjectItemCaseSensitive(
                cJSON_GetArrayItem(
                    cJSON_GetObjectItemCaseSensitive(out, "resourceSpans"), 0),
                "scopeSpans"),
            0),
        "spans");
    int n = cJSON_GetArraySize(spans);
    const char *trace = cli_str_or(cJSON_GetArrayItem(spans, 0), "traceId", "");
    if (!rc && c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "file", file);
        fo_json_add_int(o, "run", run);
        fo_json_add_int(o, "spans", n);
        cJSON_AddStringToObject(o, "trace_id", trace);
        cli_print_json(o, 0);
        cJSON_Delete(o);
    } else if (!rc) {
        printf("wrote run %lld: %d spans, trace %s, to %s\n", run, n, trace,
               file);
    }
    cJSON_Delete(out);
    return rc ? cli_fail(c, &err) : 0;
}
