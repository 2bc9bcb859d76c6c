/* test_mcp: `forum mcp` driven as a client would, through the real binary:
 * the JSON-RPC error table, version negotiation, batches, line limits,
 * stdin as a pipe and as a regular file, and every tool of the table. */
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ledger/fo_json.h"
#include "surfaces/mcp.h"
#include "surfaces/surf.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"

#define NO_REPLY 1 /* expect: no reply to this line */
#define RESULT 0   /* expect: a result with isError absent or false */
#define TOOL_ERR 2 /* expect: a result with isError true */

/* ---- helpers ---------------------------------------------------------- */

/* Canonical text of v (for comparing ids and objects). */
static char *canon(const cJSON *v)
{
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_json_canon(v, &b, &err), FO_OK, "%s", err.msg);
    char *s = fo_buf_detach(&b, NULL);
    cr_assert_not_null(s);
    return s;
}

/* Checks one JSON-RPC reply object: jsonrpc 2.0, an id member, exactly one
 * of result and error, an error with an integer code and a message. */
static void check_reply_shape(const cJSON *r, const char *line)
{
    cr_assert(cJSON_IsObject(r), "not an object: %s", line);
    const cJSON *jv = cJSON_GetObjectItemCaseSensitive(r, "jsonrpc");
    cr_assert(cJSON_IsString(jv) && !strcmp(jv->valuestring, "2.0"), "%s",
              line);
    cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(r, "id"), "%s", line);
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(r, "result");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(r, "error");
    cr_assert((res != NULL) != (e != NULL), "result xor error: %s", line);
    if (e) {
        cr_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(e, "code")));
        cr_assert(
            cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "message")));
    } else {
        cr_assert(cJSON_IsObject(res), "%s", line);
    }
    cr_assert_eq(cJSON_GetArraySize(r), 3, "extra members: %s", line);
}

/* Splits stdout into lines; each must be strict JSON and a JSON-RPC reply
 * (or, for a batch, an array of them): stdout carries protocol only. */
static cJSON **reply_lines(const struct tu_run *r, size_t *n)
{
    size_t cap = 16, count = 0;
    cJSON **v = calloc(cap, sizeof(*v));
    cr_assert_not_null(v);
    if (r->out_len)
        cr_assert_eq(r->out[r->out_len - 1], '\n',
                     "stdout does not end a line");
    const char *p = r->out;
    const char *end = r->out + r->out_len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        cr_assert_not_null(nl);
        cJSON *x = NULL;
        struct fo_err err;
        cr_assert_eq(fo_json_parse(p, (size_t)(nl - p), &x, &err), FO_OK,
                     "stdout line is not strict JSON (%s): %.200s", err.msg, p);
        char *c = canon(x); /* written with the canonical writer */
        cr_assert(strlen(c) == (size_t)(nl - p) && !memcmp(c, p, strlen(c)),
                  "stdout line is not canonical JSON: %.200s", p);
        free(c);
        if (cJSON_IsArray(x)) {
            cr_assert_gt(cJSON_GetArraySize(x), 0, "empty batch reply");
            const cJSON *it;
            cJSON_ArrayForEach (it, x)
                check_reply_shape(it, p);
        } else {
            check_reply_shape(x, p);
        }
        if (count == cap) {
            cap *= 2;
            v = realloc(v, cap * sizeof(*v));
            cr_assert_not_null(v);
        }
        v[count++] = x;
        p = nl + 1;
    }
    *n = count;
    return v;
}

static void free_lines(cJSON **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cJSON_Delete(v[i]);
    free(v);
}

/* Runs `forum --ledger dir mcp [--admin]` with input on a pipe. */
static struct tu_run run_mcp(const char *dir, const char *input, size_t len,
                             int admin)
{
    const char *argv[] = {
        "--ledger", dir, "mcp", "--init", admin ? "--admin" : NULL, NULL};
    return tu_forum(input, len, argv);
}

/* Builds lines of input: each argument one line, NULL-terminated. */
static char *lines(const char *first, ...)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    va_list ap;
    va_start(ap, first);
    for (const char *s = first; s; s = va_arg(ap, const char *)) {
        cr_assert_eq(fo_buf_puts(&b, s), FO_OK);
        cr_assert_eq(fo_buf_putc(&b, '\n'), FO_OK);
    }
    va_end(ap);
    return fo_buf_detach(&b, NULL);
}

static int error_code(const cJSON *reply)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(reply, "error");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "code");
    return cJSON_IsNumber(c) ? (int)c->valuedouble : 0;
}

static const cJSON *result_of(const cJSON *reply)
{
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(reply, "result");
    cr_assert_not_null(r, "not a result: %s", canon(reply));
    return r;
}

static void assert_id(const cJSON *reply, const char *id_canon)
{
    char *got = canon(cJSON_GetObjectItemCaseSensitive(reply, "id"));
    cr_assert_str_eq(got, id_canon);
    free(got);
}

/* A tool result: content[0] is text holding the canonical JSON of
 * structuredContent; isError as expected. Returns structuredContent. An
 * error of a tool with an outputSchema has no structuredContent: then the
 * error object {error, code} parsed from the text, kept in the reply (as
 * "parsed_error") for the reply's lifetime. */
static const cJSON *tool_content(const cJSON *reply, int is_error)
{
    const cJSON *r = result_of(reply);
    const cJSON *ie = cJSON_GetObjectItemCaseSensitive(r, "isError");
    cr_assert(cJSON_IsBool(ie), "no isError: %s", canon(reply));
    cr_assert_eq(cJSON_IsTrue(ie), is_error, "isError: %s", canon(reply));
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(r, "content");
    cr_assert(cJSON_IsArray(content) && cJSON_GetArraySize(content) == 1);
    const cJSON *item = cJSON_GetArrayItem(content, 0);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(item, "type");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(item, "text");
    cr_assert(cJSON_IsString(type) && !strcmp(type->valuestring, "text"));
    cr_assert(cJSON_IsString(text));
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(r, "structuredContent");
    if (!sc && is_error) {
        cJSON *e = NULL;
        struct fo_err perr;
        cr_assert_eq(fo_json_parse(text->valuestring, strlen(text->valuestring),
                                   &e, &perr),
                     FO_OK, "text content is not JSON: %s", perr.msg);
        char *c = canon(e);
        cr_assert_str_eq(c, text->valuestring, "text content is not canonical");
        free(c);
        cr_assert(
            cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "code")) &&
                cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "error")),
            "not an error object: %s", text->valuestring);
        cJSON_AddItemToObject((cJSON *)r, "parsed_error", e);
        return e;
    }
    cr_assert(cJSON_IsObject(sc), "structuredContent must be an object");
    cJSON *parsed = NULL;
    struct fo_err err;
    cr_assert_eq(fo_json_parse(text->valuestring, strlen(text->valuestring),
                               &parsed, &err),
                 FO_OK, "text content is not JSON: %s", err.msg);
    char *a = canon(parsed), *b = canon(sc);
    cr_assert_str_eq(a, b, "text content and structuredContent differ");
    cr_assert_str_eq(a, text->valuestring, "text content is not canonical");
    free(a);
    free(b);
    cJSON_Delete(parsed);
    return sc;
}

/* The string member `name` of obj, or "". */
static const char *str_of(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* ---- the error table -------------------------------------------------- */

struct expect {
    const char *line;
    int kind;       /* RESULT, TOOL_ERR, NO_REPLY, or a JSON-RPC error code */
    const char *id; /* canonical id of the reply */
};

static void run_table(const struct expect *t, size_t n, int admin)
{
    char *dir = tu_tmpdir();
    struct fo_buf in;
    fo_buf_init(&in, FO_BUF_UNLIMITED);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(fo_buf_puts(&in, t[i].line), FO_OK);
        cr_assert_eq(fo_buf_putc(&in, '\n'), FO_OK);
    }
    struct tu_run r = run_mcp(dir, in.data, in.len, admin);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    size_t nl;
    cJSON **v = reply_lines(&r, &nl);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i].kind == NO_REPLY)
            continue;
        cr_assert_lt(k, nl, "no reply to line %zu: %s", i, t[i].line);
        const cJSON *rep = v[k++];
        assert_id(rep, t[i].id);
        if (t[i].kind == RESULT) {
            cr_assert_eq(error_code(rep), 0, "line %zu: %s: %s", i, t[i].line,
                         canon(rep));
            const cJSON *ie =
                cJSON_GetObjectItemCaseSensitive(result_of(rep), "isError");
            cr_assert(!cJSON_IsTrue(ie), "line %zu: %s", i, canon(rep));
        } else if (t[i].kind == TOOL_ERR) {
            tool_content(rep, 1);
        } else {
            cr_assert_eq(error_code(rep), t[i].kind, "line %zu: %s: %s", i,
                         t[i].line, canon(rep));
        }
    }
    cr_assert_eq(k, nl, "more replies than requests");
    free_lines(v, nl);
    fo_buf_release(&in);
    tu_run_free(&r);
    tu_rmrf(dir);
}

#define E10                                                                    \
    "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9" \
    "\xc3\xa9"
#define E100 E10 E10 E10 E10 E10 E10 E10 E10 E10 E10

Test(mcp, error_table)
{
    static const struct expect t[] = {
        {"garbage", -32700, "null"},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"", -32700, "null"},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"ping\"}", -32700,
         "null"}, /* duplicate keys: the strict reader refuses */
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\xffng\"}", -32700,
         "null"},
        {"[]", -32600, "null"},
        {"3", -32600, "null"},
        {"\"ping\"", -32600, "null"},
        {"null", -32600, "null"},
        {"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", -32600,
         "null"}, /* a batch before initialize */
        {"{\"jsonrpc\":\"2.0\",\"id\":1}", -32600, "1"},
        {"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":7}", -32600, "2"},
        {"{\"jsonrpc\":\"1.0\",\"id\":3,\"method\":\"ping\"}", -32600, "3"},
        {"{\"id\":4,\"method\":\"ping\"}", -32600, "4"},
        {"{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}", -32600, "null"},
        {"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", -32600,
         "null"},
        {"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"nope\"}", -32601, "5"},
        {"{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"server/discover\"}",
         -32601, "6"},
        {"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\","
         "\"params\":{\"name\":\"no_such_tool\",\"arguments\":{}}}",
         -32602, "7"},
        {"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\","
         "\"params\":{\"name\":\"ledger_redact\",\"arguments\":{\"seq\":0,"
         "\"reason\":\"x\"}}}",
         -32602, "8"}, /* admin tool without --admin */
        {"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\","
         "\"params\":{\"arguments\":{}}}",
         -32602, "9"},
        {"{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"tools/call\","
         "\"params\":[1]}",
         -32602, "10"},
        {"{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"tools/call\","
         "\"params\":{\"name\":\"ledger_get\",\"arguments\":{}}}",
         TOOL_ERR, "11"},
        {"{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\","
         "\"params\":{\"name\":\"ledger_get\",\"arguments\":7}}",
         TOOL_ERR, "12"},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
         NO_REPLY, NULL},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"tools/list\"}", NO_REPLY, NULL},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"no/such\"}", NO_REPLY, NULL},
        {"{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}", NO_REPLY, NULL},
        {"", NO_REPLY, NULL},
        {"  \r", NO_REPLY, NULL},
        /* Messages quoting long non-ASCII names stay valid UTF-8. */
        {"{\"jsonrpc\":\"2.0\",\"id\":14,\"method\":\"x" E100 "\"}", -32601,
         "14"},
        {"{\"jsonrpc\":\"2.0\",\"id\":15,\"method\":\"tools/call\","
         "\"params\":{\"name\":\"ledger_verify\",\"arguments\":{\"" E100 E100
             E100 "\":1}}}",
         TOOL_ERR, "15"},
        {"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ping\"}", RESULT, "0"},
        {"{\"jsonrpc\":\"2.0\",\"id\":-3,\"method\":\"ping\"}", RESULT, "-3"},
        {"{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"ping\"}", RESULT,
         "\"abc\""},
        {"{\"jsonrpc\":\"2.0\",\"id\":\"\",\"method\":\"ping\"}", RESULT,
         "\"\""},
        {"{\"jsonrpc\":\"2.0\",\"id\":\"\xc3\xa9\\n\",\"method\":\"ping\"}",
         RESULT, "\"\xc3\xa9\\n\""},
        {"{\"jsonrpc\":\"2.0\",\"id\":1234567890123,\"method\":\"ping\"}",
         RESULT, "1234567890123"},
        {"{\"jsonrpc\":\"2.0\",\"id\":13,\"method\":\"tools/list\","
         "\"params\":{\"cursor\":\"x\"}}",
         RESULT, "13"},
    };
    run_table(t, sizeof(t) / sizeof(t[0]), 0);
}

Test(mcp, bad_arguments_name_the_field)
{
    char *dir = tu_tmpdir();
    char *in = lines(
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"ledger_get\",\"arguments\":{\"seq\":\"x\"}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"ledger_range\",\"arguments\":{\"limit\":5000}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"ledger_verify\",\"arguments\":{\"bogus\":1}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"ledger_get\",\"arguments\":{\"seq\":5}}}",
        NULL);
    struct tu_run r = run_mcp(dir, in, strlen(in), 0);
    cr_assert_eq(r.status, 0);
    size_t n;
    cJSON **v = reply_lines(&r, &n);
    cr_assert_eq(n, 4);
    const char *field[] = {"seq", "limit", "bogus"};
    for (size_t i = 0; i < 3; i++) {
        const cJSON *e = tool_content(v[i], 1);
        cr_assert_str_eq(str_of(e, "code"), "invalid_input");
        cr_assert_not_null(strstr(str_of(e, "error"), field[i]), "%s",
                           str_of(e, "error"));
    }
    cr_assert_str_eq(str_of(tool_content(v[3], 1), "code"), "not_found");
    free_lines(v, n);
    free(in);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(mcp, client_responses_are_logged_not_answered)
{
    char *dir = tu_tmpdir();
    char *in = lines("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}",
                     "{\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{\"code\":1,"
                     "\"message\":\"x\"}}",
                     NULL);
    struct tu_run r = run_mcp(dir, in, strlen(in), 0);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.out_len, 0, "stdout: %s", r.out);
    cr_assert_not_null(strstr(r.err, "forum mcp:"));
    free(in);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* ---- lines and input -------------------------------------------------- */

/* A ping with id `id`, padded with spaces to exactly len bytes. */
static void padded_ping(struct fo_buf *b, int id, size_t len)
{
    char msg[64];
    int n = snprintf(msg, sizeof(msg),
                     "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"ping\"}", id);
    cr_assert(n > 0 && (size_t)n <= len);
    cr_assert_eq(fo_buf_puts(b, msg), FO_OK);
    for (size_t i = (size_t)n; i < len; i++)
        cr_assert_eq(fo_buf_putc(b, ' '), FO_OK);
    cr_assert_eq(fo_buf_putc(b, '\n'), FO_OK);
}

Test(mcp, over_long_line_is_answered_and_skipped)
{
    char *dir = tu_tmpdir();
    struct fo_buf in;
    fo_buf_init(&in, FO_BUF_UNLIMITED);
    padded_ping(&in, 1, SURF_MCP_LINE_MAX);          /* at the cap: served */
    padded_ping(&in, 2, SURF_MCP_LINE_MAX + 1);      /* one over: refused */
    padded_ping(&in, 3, 10 + 3 * SURF_MCP_LINE_MAX); /* far over */
    cr_assert_eq(fo_buf_puts(&in, "{\"jsonrpc\":\"2.0\",\"id\":4,"
                                  "\"method\":\"ping\"}\n"),
                 FO_OK);
    struct tu_run r = run_mcp(dir, in.data, in.len, 0);
    cr_assert_eq(r.status, 0, "%s", r.err);
    size_t n;
    cJSON **v = reply_lines(&r, &n);
    cr_assert_eq(n, 4);
    assert_id(v[0], "1");
    cr_assert_eq(error_code(v[0]), 0);
    assert_id(v[1], "null");
    cr_assert_eq(error_code(v[1]), -32600);
    assert_id(v[2], "null");
    cr_assert_eq(error_code(v[2]), -32600);
    assert_id(v[3], "4");
    cr_assert_eq(error_code(v[3]), 0);
    free_lines(v, n);
    fo_buf_release(&in);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(mcp, over_long_last_line_without_newline)
{
    char *dir = tu_tmpdir();
    struct fo_buf in;
    fo_buf_init(&in, FO_BUF_UNLIMITED);
    padded_ping(&in, 1, SURF_MCP_LINE_MAX + 100);
    in.len--; /* no final newline */
    struct tu_run r = run_mcp(dir, in.data, in.len, 0);
    cr_assert_eq(r.status, 0);
    size_t n;
    cJSON **v = reply_lines(&r, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(error_code(v[0]), -32600);
    free_lines(v, n);
    fo_buf_release(&in);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(mcp, eof_exits_zero_and_serves_a_last_line_without_newline)
{
    char *dir = tu_tmpdir();
    struct tu_run r = run_mcp(dir, NULL, 0, 0);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.out_len, 0);
    tu_run_free(&r);
    const char *in = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n"
                     "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}";
    r = run_mcp(dir, in, strlen(in), 0);
    cr_assert_eq(r.status, 0);
    size_t n;
    cJSON **v = reply_lines(&r, &n);
    cr_assert_eq(n, 2);
    assert_id(v[1], "2");
    free_lines(v, n);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(mcp, stdin_may_be_a_regular_file)
{
    char *dir = tu_tmpdir();
    char path[512];
    snprintf(path, sizeof(path), "%s/in.jsonl", dir);
    char *in = lines(
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
        "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"
        "\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}",
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"ledger_append\",\"arguments\":{\"actor\":\"a\","
        "\"kind\":\"k\",\"payload\":{\"n\":1}}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"ledger_verify\"}}",
        NULL);
    cr_assert_eq(tu_write_file(path, in, strlen(in)), 0);
    char ledger[512];
    snprintf(ledger, sizeof(ledger), "%s/ledger", dir);
    const char *argv[] = {"--ledger", ledger, "mcp", "--init", NULL};
    struct tu_run r = tu_forum_file(path, argv);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    size_t n;
    cJSON **v = reply_lines(&r, &n);
    cr_assert_eq(n, 3, "stdout: %s stderr: %s", r.out, r.err);
    cr_assert_str_eq(str_of(result_of(v[0]), "protocolVersion"), "2025-06-18");
    cr_assert_eq(tool_content(v[1], 0) != NULL, 1);
    const cJSON *ver = tool_content(v[2], 0);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ver, "ok")));
    free_lines(v, n);
    free(in);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(mcp, deep_and_hostile_lines_never_crash)
{
    char *dir = tu_tmpdir();
    struct fo_buf in;
    fo_buf_init(&in, FO_BUF_UNLIMITED);
    for (int i = 0; i < 100000; i++)
        cr_assert_eq(fo_buf_putc(&in, '['), FO_OK);
    cr_assert_eq(fo_buf_puts(&in, "\n{\"a\":\"\\ud800\"}\n\x01\x02\n"
                                  "{\"jsonrpc\":\"2.0\",\"id\":1e400,"
                                  "\"method\":\"ping\"}\n"),
                 FO_OK);
    /* A payload as deep as a line may hold (the line is 64 deep) is
     * appended; one level more and the line is refused. */
    for (int depth = 61; depth <= 62; depth++) {
        cr_assert_eq(fo_buf_puts(&in, "{\"jsonrpc\":\"2.0\",\"id\":2,"
                                      "\"method\":\"tools/call\",\"params\":"
                                      "{\"name\":\"ledger_append\","
                                      "\"arguments\":{\"actor\":\"a\","
                                      "\"kind\":\"k\",\"payload\":"),
                     FO_OK);
        for (int i = 0; i < depth; i++)
            cr_assert_eq(fo_buf_putc(&in, '['), FO_OK);
        for (int i = 0; i < depth; i++)
            cr_assert_eq(fo_buf_putc(&in, ']'), FO_OK);
        cr_assert_eq(fo_buf_puts(&in, "}}}\n"), FO_OK);
    }
    cr_assert_eq(fo_buf_puts(&in, "{\"jsonrpc\":\"2.0\",\"id\":3,"
                                  "\"method\":\"tools/call\",\"params\":"
                                  "{\"name\":\"ledger_body\","
                                  "\"arguments\":{\"seq\":0}}}\n"),
                 FO_OK);
    /* Deterministic byte mutations of valid messages. */
    const char *seed[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"ledger_get\",\"arguments\":{\"seq\":0}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"initialize\","
        "\"params\":{\"protocolVersion\":\"2025-03-26\"}}",
        "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"},{\"jsonrpc\":"
        "\"2.0\",\"method\":\"tools/list\"}]",
    };
    unsigned x = 12345;
    for (int i = 0; i < 3000; i++) {
        char m[256];
        int len = snprintf(m, sizeof(m), "%s", seed[i % 3]);
        for (int k = 0; k < 1 + i % 4; k++) {
            x = x * 1103515245u + 12345u;
            size_t at = (x >> 8) % (size_t)len;
            x = x * 1103515245u + 12345u;
            m[at] = (char)((x >> 16) & 0xff);
            if (m[at] == '\n')
                m[at] = ' ';
        }
        cr_assert_eq(fo_buf_append(&in, m, (size_t)len), FO_OK);
        cr_assert_eq(fo_buf_putc(&in, '\n'), FO_OK);
    }
    /* Through a regular file: tu_forum writes stdin with blocking writes,
     * which can deadlock with a child whose output fills its pipe. */
    char path[512], ledger[512];
    snprintf(path, sizeof(path), "%s/in.jsonl", dir);
    snprintf(ledger, sizeof(ledger), "%s/ledger", dir);
    cr_assert_eq(tu_write_file(path, in.data, in.len), 0);
    const char *argv[] = {"--ledger", ledger, "mcp", "--init", NULL};
    struct tu_run r = tu_forum_file(path, argv);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    size_t n;
    cJSON **v = reply_lines(&r, &n);
    cr_assert_geq(n, 7);
    for (size_t i = 0; i < 4; i++)
        cr_assert_eq(error_code(v[i]), -32700, "line %zu: %s", i, canon(v[i]));
    tool_content(v[4], 0);
    cr_assert_eq(error_code(v[5]), -32700);
    const cJSON *body =
        cJSON_GetObjectItemCaseSensitive(tool_content(v[6], 0), "body");
    cr_assert(cJSON_IsArray(body));
    free_lines(v, n);
    fo_buf_release(&in);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* ---- initialize and batches ------------------------------------------- */

static cJSON *initialize(const char *dir, const char *version)
{
    char line[256];
    if (version)
        snprintf(line, sizeof(line),
                 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
                 "\"params\":{\"protocolVersion\":\"%s\",\"capabilities\":{},"
                 "\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\n",
                 version);
    else
        snprintf(line, sizeof(line),
                 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}\n");
    struct tu_run r = run_mcp(dir, line, strlen(line), 0);
    cr_assert_eq(r.status, 0);
    size_t n;
    cJSON **v = reply_lines(&r, &n);
    cr_assert_eq(n, 1);
    cJSON *res = cJSON_DetachItemFromObjectCaseSensitive(v[0], "result");
    cr_assert_not_null(res, "%s", r.out);
    free_lines(v, n);
    tu_run_free(&r);
    return res;
}

Test(mcp, initialize_negotiates_the_version)
{
    char *dir = tu_tmpdir();
    const char *known[] = {"2024-11-05", "2025-03-26", "2025-06-18",
                           "2025-11-25"};
    for (size_t i = 0; i < 4; i++) {
        cJSON *res = initialize(dir, known[i]);
        cr_assert_str_eq(str_of(res, "protocolVersion"), known[i]);
        const cJSON *caps =
            cJSON_GetObjectItemCaseSensitive(res, "capabilities");
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(caps, "tools");
        cr_assert(cJSON_IsFalse(
            cJSON_GetObjectItemCaseSensitive(tools, "listChanged")));
        const cJSON *info = cJSON_GetObjectItemCaseSensitive(res, "serverInfo");
        cr_assert_str_eq(str_of(info, "name"), "forum");
        cr_assert_str_eq(str_of(info, "version"), SURF_MCP_SERVER_VERSION);
        cJSON_Delete(res);
    }
    const char *unknown[] = {"1999-01-01", "2025-11-26", "", NULL};
    for (size_t i = 0; i < 4; i++) {
        cJSON *res = initialize(dir, unknown[i]);
        cr_assert_str_eq(str_of(res, "protocolVersion"), "2025-11-25");
        cJSON_Delete(res);
    }
    tu_rmrf(dir);
}

static char *init_line(const char *version)
{
    char *s = malloc(256);
    cr_assert_not_null(s);
    snprintf(s, 256,
             "{\"jsonrpc\":\"2.0\",\"id\":\"init\",\"method\":\"initialize\","
             "\"params\":{\"protocolVersion\":\"%s\"}}",
             version);
    return s;
}

#define BATCH                                                                  \
    "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"},"                     \
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"},"          \
    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"      \
    "{\"name\":\"health\"}},"                                                  \
    "3,"                                                                       \
    "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"nope\"}]"
#define ONLY_NOTIFICATIONS                                                     \
    "[{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"},"         \
    "{\"jsonrpc\":\"2.0\",\"method\":\"ping\"}]"
#define PING9 "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}"

Test(mcp, batches_only_under_2025_03_26)
{
    char *dir = tu_tmpdir();
    char *init = init_line("2025-03-26");
    char *in = lines(init, BATCH, ONLY_NOTIFICATIONS, "[]", PING9, NULL);
    struct tu_run r = run_mcp(dir, in, strlen(in), 0);
    cr_assert_eq(r.status, 0);
    size_t n;
    cJSON **v = reply_lines(&r, &n);
    cr_assert_eq(n, 4, "stdout: %s", r.out); /* init, batch, [], ping */
    cr_assert_str_eq(str_of(result_of(v[0]), "protocolVersion"), "2025-03-26");
    cr_assert(cJSON_IsArray(v[1]));
    cr_assert_eq(cJSON_GetArraySize(v[1]), 4, "%s", canon(v[1]));
    assert_id(cJSON_GetArrayItem(v[1], 0), "1");
    cr_assert_eq(error_code(cJSON_GetArrayItem(v[1], 0)), 0);
    assert_id(cJSON_GetArrayItem(v[1], 1), "2");
    const cJSON *h = tool_content(cJSON_GetArrayItem(v[1], 1), 0);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(h, "ok")));
    assert_id(cJSON_GetArrayItem(v[1], 2), "null");
    cr_assert_eq(error_code(cJSON_GetArrayItem(v[1], 2)), -32600);
    assert_id(cJSON_GetArrayItem(v[1], 3), "4");
    cr_assert_eq(error_code(cJSON_GetArrayItem(v[1], 3)), -32601);
    cr_assert(!cJSON_IsArray(v[2]));
    cr_assert_eq(error_code(v[2]), -32600); /* [] always */
    assert_id(v[3], "9");
    free_lines(v, n);
    free(in);
    free(init);
    tu_run_free(&r);

    const char *others[] = {"2024-11-05", "2025-06-18", "2025-11-25",
                            "1999-01-01"};
    for (size_t i = 0; i < 4; i++) {
        init = init_line(others[i]);
        in = lines(init, BATCH, ONLY_NOTIFICATIONS, PING9, NULL);
        r = run_mcp(dir, in, strlen(in), 0);
        cr_assert_eq(r.status, 0);
        v = reply_lines(&r, &n);
        cr_assert_eq(n, 4, "%s: %s", others[i], r.out);
        for (size_t k = 1; k <= 2; k++) {
            cr_assert(!cJSON_IsArray(v[k]));
            assert_id(v[k], "null");
            cr_assert_eq(error_code(v[k]), -32600);
        }
        assert_id(v[3], "9");
        free_lines(v, n);
        free(in);
        free(init);
        tu_run_free(&r);
    }
    tu_rmrf(dir);
}

/* A numeric id comes back as the bytes it was sent as: cJSON holds a
 * double, which would turn 9007199254740993 into ...992 and 1e2 into 100. */
Test(mcp, numeric_ids_are_echoed_byte_for_byte)
{
    char *dir = tu_tmpdir();
    char *init = init_line("2025-03-26");
#define PING(id) "{\"jsonrpc\":\"2.0\",\"id\":" id ",\"method\":\"ping\"}"
#define PONG(id) "{\"id\":" id ",\"jsonrpc\":\"2.0\",\"result\":{}}"
    char *in = lines(init, PING("9007199254740993"), PING("1e2"), PING("-0"),
                     PING("1.50"), PING("123456789012345678901234567890"),
                     "{\"jsonrpc\":\"2.0\",\"id\":18446744073709551617,"
                     "\"method\":\"nope\",\"params\":{\"n\":1e2}}",
                     "[" PING("9007199254740995") "," PING("2E+1") "]", NULL);
    struct tu_run r = run_mcp(dir, in, strlen(in), 0);
    cr_assert_eq(r.status, 0, "%s", r.err);
    static const char *const want[] = {
        PONG("9007199254740993"),
        PONG("1e2"),
        PONG("-0"),
        PONG("1.50"),
        PONG("123456789012345678901234567890"),
        "{\"error\":{\"code\":-32601,\"message\":\"method not found: "
        "nope\"},\"id\":18446744073709551617,\"jsonrpc\":\"2.0\"}",
        "[" PONG("9007199254740995") "," PONG("2E+1") "]",
    };
#undef PING
#undef PONG
    const char *line = strchr(r.out, '\n'); /* past initialize's reply */
    cr_assert_not_null(line, "stdout: %s", r.out);
    line++;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const char *nl = strchr(line, '\n');
        cr_assert_not_null(nl, "reply %zu missing: %s", i, r.out);
        cr_assert(strlen(want[i]) == (size_t)(nl - line) &&
                      memcmp(line, want[i], strlen(want[i])) == 0,
                  "reply %zu: got %.*s, want %s", i, (int)(nl - line), line,
                  want[i]);
        line = nl + 1;
    }
    cr_assert_str_eq(line, "");
    free(in);
    free(init);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(mcp, batch_size_is_bounded)
{
    char *dir = tu_tmpdir();
    char *init = init_line("2025-03-26");
    struct fo_buf in;
    fo_buf_init(&in, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_buf_puts(&in, init), FO_OK);
    cr_assert_eq(fo_buf_puts(&in, "\n["), FO_OK);
    for (int i = 0; i < 1001; i++)
        cr_assert_eq(fo_buf_puts(&in, i ? ",{}" : "{}"), FO_OK);
    cr_assert_eq(fo_buf_puts(&in, "]\n[{}]\n"), FO_OK);
    struct tu_run r = run_mcp(dir, in.data, in.len, 0);
    cr_assert_eq(r.status, 0);
    size_t n;
    cJSON **v = reply_lines(&r, &n);
    cr_assert_eq(n, 3);
    cr_assert_eq(error_code(v[1]), -32600);
    cr_assert(cJSON_IsArray(v[2]) && cJSON_GetArraySize(v[2]) == 1);
    free_lines(v, n);
    fo_buf_release(&in);
    free(init);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* ---- tools ------------------------------------------------------------ */

static cJSON *tools_list(const char *dir, int admin)
{
    const char *in =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n";
    struct tu_run r = run_mcp(dir, in, strlen(in), admin);
    cr_assert_eq(r.status, 0);
    size_t n;
    cJSON **v = reply_lines(&r, &n);
    cr_assert_eq(n, 1);
    cJSON *tools = cJSON_DetachItemFromObjectCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(v[0], "result"), "tools");
    cr_assert(cJSON_IsArray(tools), "%s", r.out);
    free_lines(v, n);
    tu_run_free(&r);
    return tools;
}

static const cJSON *find_tool(const cJSON *tools, const char *name)
{
    const cJSON *t;
    cJSON_ArrayForEach (t, tools)
        if (!strcmp(str_of(t, "name"), name))
            return t;
    return NULL;
}

Test(mcp, tools_list_is_the_table)
{
    char *dir = tu_tmpdir();
    size_t n;
    const struct surf_method *m = surf_methods(&n);
    for (int admin = 0; admin <= 1; admin++) {
        cJSON *tools = tools_list(dir, admin);
        size_t expected = 0;
        for (size_t i = 0; i < n; i++) {
            const cJSON *t = find_tool(tools, m[i].name);
            if ((m[i].flags & SURF_ADMIN) && !admin) {
                cr_assert_null(t, "admin tool %s listed without --admin",
                               m[i].name);
                continue;
            }
            expected++;
            cr_assert_not_null(t, "%s missing from tools/list", m[i].name);
            cr_assert_str_eq(str_of(t, "description"), m[i].summary);
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(t, "inputSchema");
            cr_assert_str_eq(str_of(s, "type"), "object", "%s", m[i].name);
            char *a = canon(s), *b = canon(surf_schema(&m[i]));
            cr_assert_str_eq(a, b);
            free(a);
            free(b);
        }
        /* and the reference's names, each once, as the method they are */
        size_t na;
        const struct surf_alias *al = surf_aliases(&na);
        for (size_t i = 0; i < na; i++) {
            const struct surf_method *to = surf_find(al[i].name);
            cr_assert_not_null(to, "alias %s: no method", al[i].name);
            if ((to->flags & SURF_ADMIN) && !admin)
                continue;
            expected++;
            const cJSON *t = find_tool(tools, al[i].name);
            cr_assert_not_null(t, "%s missing from tools/list", al[i].name);
            char *a = canon(cJSON_GetObjectItemCaseSensitive(t, "inputSchema"));
            char *b = canon(surf_schema(to));
            cr_assert_str_eq(a, b, "%s", al[i].name);
            free(a);
            free(b);
        }
        cr_assert_eq((size_t)cJSON_GetArraySize(tools), expected);
        const cJSON *t;
        cJSON_ArrayForEach (t, tools) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(t, "inputSchema");
            cr_assert_str_eq(str_of(s, "type"), "object");
        }
        cJSON_Delete(tools);
    }
    tu_rmrf(dir);
}

/* Arguments for the methods that need input, on the ledger made by
 * make_ledger (entries 0..2, entry 2 for redaction, one signed checkpoint).
 * A method with required input and no row here fails the test: add one. */
static const char *args_for(const struct surf_method *m)
{
    return tu_method_args(m);
}

static void cli_ok(const char *dir, const char *a, const char *b, const char *c,
                   const char *d, const char *e, const char *f, const char *g)
{
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", a, b, c, d, e, f, g, NULL);
    cr_assert_eq(r.status, 0, "forum ledger %s: %s", a, r.err);
    tu_run_free(&r);
}

static void make_ledger(const char *dir)
{
    /* entries 0 and 1 read as a run that ended (run_get, run_cancel) */
    cli_ok(dir, "append", "--actor", "a", "--kind", "request", "--payload",
           "{\"request\":\"hi\",\"via\":\"submit\"}");
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "ledger", "append", "--actor", "b",
                  "--kind", "answer", "--parent", "0", "--payload",
                  "{\"answer\":42}", (char *)NULL);
    cr_assert_eq(r.status, 0, "forum ledger append: %s", r.err);
    tu_run_free(&r);
    cli_ok(dir, "append", "--actor", "c", "--kind", "secret", "--payload",
           "{\"pin\":1234}");
    cli_ok(dir, "checkpoint", "--sign", NULL, NULL, NULL, NULL, NULL);
}

Test(mcp, every_tool_of_the_table_answers)
{
    char *dir = tu_tmpdir();
    make_ledger(dir);
    size_t n;
    const struct surf_method *m = surf_methods(&n);
    struct fo_buf in;
    fo_buf_init(&in, FO_BUF_UNLIMITED);
    size_t calls = 0;
    for (size_t i = 0; i < n; i++)
        if (!tu_method_skip(&m[i]) && ++calls)
            cr_assert_eq(
                fo_buf_printf(&in,
                              "{\"jsonrpc\":\"2.0\",\"id\":%zu,\"method\":"
                              "\"tools/call\",\"params\":{\"name\":\"%s\","
                              "\"arguments\":%s}}\n",
                              i, m[i].name, args_for(&m[i])),
                FO_OK);
    struct tu_run r = run_mcp(dir, in.data, in.len, 1);
    cr_assert_eq(r.status, 0, "%s", r.err);
    size_t nl;
    cJSON **v = reply_lines(&r, &nl);
    cr_assert_eq(nl, calls);
    /* long tools (submit, plan, plan_run, verify) answer when they end,
     * maybe after calls made later: each reply is found by its id */
    for (size_t i = 0; i < n; i++) {
        if (tu_method_skip(&m[i]))
            continue;
        char id[32];
        snprintf(id, sizeof(id), "%zu", i);
        const cJSON *line = NULL;
        for (size_t k = 0; k < nl && !line; k++) {
            const cJSON *vid = cJSON_GetObjectItemCaseSensitive(v[k], "id");
            if (cJSON_IsNumber(vid) && vid->valuedouble == (double)i)
                line = v[k];
        }
        cr_assert_not_null(line, "no reply to %s", m[i].name);
        assert_id(line, id);
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(line, "result");
        cr_assert_not_null(res, "%s: %s", m[i].name, canon(line));
        const cJSON *ie = cJSON_GetObjectItemCaseSensitive(res, "isError");
        cr_assert(cJSON_IsFalse(ie), "%s failed: %s", m[i].name, canon(res));
        tool_content(line, 0);
    }
    free_lines(v, nl);
    fo_buf_release(&in);
    tu_run_free(&r);
    /* The redaction and the append left a ledger that still verifies. */
    struct tu_run ver =
        tu_forumv(NULL, "--ledger", dir, "ledger", "verify", NULL);
    cr_assert_eq(ver.status, 0, "%s%s", ver.out, ver.err);
    tu_run_free(&ver);
    tu_rmrf(dir);
}

Test(mcp, append_then_verify)
{
    char *dir = tu_tmpdir();
    char *in = lines(
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"ledger_append\",\"arguments\":{\"actor\":\"agent\","
        "\"kind\":\"step\",\"payload\":{\"ts\":1732000000000000,\"f\":1e-7}}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"ledger_verify\",\"arguments\":{}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"ledger_body\",\"arguments\":{\"seq\":0}}}",
        NULL);
    struct tu_run r = run_mcp(dir, in, strlen(in), 0);
    cr_assert_eq(r.status, 0);
    size_t n;
    cJSON **v = reply_lines(&r, &n);
    cr_assert_eq(n, 3);
    const cJSON *e = tool_content(v[0], 0);
    cr_assert_str_eq(str_of(e, "actor"), "agent");
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(e, "seq")->valuedouble, 0);
    const cJSON *ver = tool_content(v[1], 0);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ver, "ok")));
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(ver, "entries")->valuedouble,
                 1);
    const cJSON *body =
        cJSON_GetObjectItemCaseSensitive(tool_content(v[2], 0), "body");
    char *b = canon(body);
    cr_assert_str_eq(b, "{\"f\":1e-7,\"ts\":1732000000000000}");
    cr_assert_not_null(strstr(r.out, "1732000000000000"),
                       "integers never in exponent form");
    free(b);
    free_lines(v, n);
    free(in);
    tu_run_free(&r);
    struct tu_run cv =
        tu_forumv(NULL, "--ledger", dir, "ledger", "verify", NULL);
    cr_assert_eq(cv.status, 0);
    tu_run_free(&cv);
    tu_rmrf(dir);
}

/* A ledger_append line whose payload is one string of len bytes. */
static void append_line(struct fo_buf *b, int id, size_t len)
{
    cr_assert_eq(fo_buf_printf(b,
                               "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":"
                               "\"tools/call\",\"params\":{\"name\":"
                               "\"ledger_append\",\"arguments\":{\"actor\":"
                               "\"a\",\"kind\":\"k\",\"payload\":\"",
                               id),
                 FO_OK);
    for (size_t i = 0; i < len; i++)
        cr_assert_eq(fo_buf_putc(b, 'x'), FO_OK);
    cr_assert_eq(fo_buf_puts(b, "\"}}}\n"), FO_OK);
}

Test(mcp, body_over_the_limit_is_a_tool_error)
{
    char *dir = tu_tmpdir();
    struct fo_buf in;
    fo_buf_init(&in, FO_BUF_UNLIMITED);
    /* The canonical payload is len + 2 bytes (the quotes). */
    append_line(&in, 1, (1u << 20) - 2);      /* exactly 1 MiB: accepted */
    append_line(&in, 2, (1u << 20) - 1);      /* one byte over the body limit */
    append_line(&in, 3, (1u << 20) + 200000); /* over the input cap */
    cr_assert_eq(fo_buf_puts(&in, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":"
                                  "\"tools/call\",\"params\":{\"name\":"
                                  "\"ledger_verify\"}}\n"),
                 FO_OK);
    struct tu_run r = run_mcp(dir, in.data, in.len, 0);
    cr_assert_eq(r.status, 0, "%s", r.err);
    size_t n;
    cJSON **v = reply_lines(&r, &n);
    cr_assert_eq(n, 4);
    tool_content(v[0], 0);
    cr_assert_str_eq(str_of(tool_content(v[1], 1), "code"), "body_too_large");
    cr_assert_str_eq(str_of(tool_content(v[2], 1), "code"), "input_too_large");
    const cJSON *ver = tool_content(v[3], 0);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(ver, "entries")->valuedouble,
                 1, "only the first append went in");
    free_lines(v, n);
    fo_buf_release(&in);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* ---- the command ------------------------------------------------------ */

Test(mcp, command_line)
{
    char *dir = tu_tmpdir();
    struct tu_run r = tu_forumv(NULL, "mcp", "--help", NULL);
    cr_assert_eq(r.status, 0);
    cr_assert_not_null(strstr(r.out, "usage: forum"));
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "mcp", "--bogus", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert_eq(r.out_len, 0);
    tu_run_free(&r);
    /* A data dir that is a regular file: the ledger cannot be opened. */
    char file[512];
    snprintf(file, sizeof(file), "%s/file", dir);
    cr_assert_eq(tu_write_file(file, "x", 1), 0);
    r = tu_forumv("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n",
                  "--ledger", file, "mcp", NULL);
    cr_assert_eq(r.status, 3, "exit %d: %s", r.status, r.err);
    cr_assert_eq(r.out_len, 0);
    cr_assert_gt(r.err_len, 0);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(mcp, no_ledger_is_made_without_init_and_the_ledger_is_named)
{
    char *dir = tu_tmpdir();
    char path[4096];
    snprintf(path, sizeof(path), "%s/elsewhere", dir);
    const char *in = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";
    struct tu_run r = tu_forumv(in, "--ledger", path, "mcp", NULL);
    cr_assert_eq(r.status, 3, "%s", r.err);
    cr_assert(strstr(r.err, "--init") && strstr(r.err, "FORUM_LEDGER"), "%s",
              r.err);
    cr_assert_eq(r.out_len, 0, "stdout: %s", r.out);
    cr_assert_neq(access(path, F_OK), 0, "a ledger dir was made");
    tu_run_free(&r);
    r = tu_forumv(in, "--ledger", path, "mcp", "--init", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.err, "forum mcp: ledger ") && strstr(r.err, "elsewhere"),
              "%s", r.err);
    cr_assert(strstr(r.out, "\"id\":1"), "%s", r.out);
    tu_run_free(&r);
    /* an existing ledger needs no --init */
    r = tu_forumv(in, "--ledger", path, "mcp", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* What a model reads: every tool titled and annotated, every property of
 * every input described, the plan and gate inputs with their shapes. */
Test(mcp, tools_are_titled_annotated_and_every_property_described)
{
    char *dir = tu_tmpdir();
    const char *in =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n";
    struct tu_run r = run_mcp(dir, in, strlen(in), 1);
    cr_assert_eq(r.status, 0, "%s", r.err);
    size_t n;
    cJSON **v = reply_lines(&r, &n);
    cr_assert_eq(n, 1);
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(v[0], "result"), "tools");
    cr_assert_gt(cJSON_GetArraySize(tools), 20);
    static const char *const hints[] = {"readOnlyHint", "destructiveHint",
                                        "idempotentHint", "openWorldHint"};
    const cJSON *t;
    cJSON_ArrayForEach (t, tools) {
        const char *name = str_of(t, "name");
        cr_assert(str_of(t, "title") && *str_of(t, "title"), "%s: no title",
                  name);
        const cJSON *ann = cJSON_GetObjectItemCaseSensitive(t, "annotations");
        for (size_t i = 0; i < 4; i++)
            cr_assert(
                cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(ann, hints[i])),
                "%s: no %s", name, hints[i]);
        const cJSON *p;
        cJSON_ArrayForEach (
            p, cJSON_GetObjectItemCaseSensitive(
                   cJSON_GetObjectItemCaseSensitive(t, "inputSchema"),
                   "properties")) {
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(p, "description");
            cr_assert(cJSON_IsString(d) && *d->valuestring,
                      "%s.%s: no description", name, p->string);
        }
        if (!strcmp(name, "ledger_verify"))
            cr_assert(cJSON_IsTrue(
                cJSON_GetObjectItemCaseSensitive(ann, "readOnlyHint")));
        if (!strcmp(name, "ledger_redact"))
            cr_assert(cJSON_IsTrue(
                cJSON_GetObjectItemCaseSensitive(ann, "destructiveHint")));
        if (!strcmp(name, "plan_run")) {
            const cJSON *plan = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetObjectItemCaseSensitive(t, "inputSchema"),
                    "properties"),
                "plan");
            cr_assert_not_null(
                cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetObjectItemCaseSensitive(plan, "properties"),
                    "tasks"),
                "plan_run's plan has no shape");
        }
    }
    free_lines(v, n);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* The ledger as resources, and prompts an editor can start from. */
Test(mcp, resources_and_prompts)
{
    char *dir = tu_tmpdir();
    make_ledger(dir);
    const char *in =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
        "{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"resources/list\"}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"resources/templates/"
        "list\"}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"resources/read\","
        "\"params\":{\"uri\":\"forum://entry/1\"}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"resources/read\","
        "\"params\":{\"uri\":\"forum://run/0\"}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"resources/read\","
        "\"params\":{\"uri\":\"forum://checkpoint/latest\"}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"resources/read\","
        "\"params\":{\"uri\":\"forum://entry/999\"}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"prompts/list\"}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"prompts/get\",\"params\":"
        "{\"name\":\"audit_run\",\"arguments\":{\"run\":\"0\"}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"prompts/get\","
        "\"params\":{\"name\":\"nope\"}}\n";
    struct tu_run r = run_mcp(dir, in, strlen(in), 0);
    cr_assert_eq(r.status, 0, "%s", r.err);
    size_t n;
    cJSON **v = reply_lines(&r, &n);
    cr_assert_eq(n, 10);
    const cJSON *caps = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(v[0], "result"), "capabilities");
    cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(caps, "resources"));
    cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(caps, "prompts"));
    /* entry 1: the answer {"answer": 42} */
    const cJSON *c0 = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(v[3], "result"), "contents"),
        0);
    cr_assert_str_eq(str_of(c0, "uri"), "forum://entry/1");
    cJSON *e = NULL;
    struct fo_err err;
    cr_assert_eq(
        fo_json_parse(str_of(c0, "text"), strlen(str_of(c0, "text")), &e, &err),
        FO_OK);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(
                     cJSON_GetObjectItemCaseSensitive(e, "body"), "answer")
                     ->valuedouble,
                 42);
    cr_assert_str_eq(
        str_of(cJSON_GetObjectItemCaseSensitive(e, "entry"), "kind"), "answer");
    cJSON_Delete(e);
    /* the run and the signed checkpoint */
    char *c4 = canon(v[4]), *c5 = canon(v[5]);
    cr_assert(strstr(c4, "\\\"state\\\":\\\"done\\\""), "%s", c4);
    cr_assert(strstr(c5, "\\u2014") || strstr(c5, "—"), "no signature line: %s",
              c5);
    free(c4);
    free(c5);
    /* a missing entry is -32002 */
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(
                     cJSON_GetObjectItemCaseSensitive(v[6], "error"), "code")
                     ->valuedouble,
                 -32002);
    char *c7 = canon(v[7]);
    cr_assert(strstr(c7, "audit_run") && strstr(c7, "explain_verify_failure"));
    free(c7);
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(v[8], "result"), "messages");
    cr_assert_eq(cJSON_GetArraySize(msgs), 2);
    cr_assert_str_eq(str_of(cJSON_GetObjectItemCaseSensitive(
                                cJSON_GetArrayItem(msgs, 1), "content"),
                            "type"),
                     "resource");
    cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(v[9], "error"));
    free_lines(v, n);
    tu_run_free(&r);
    tu_rmrf(dir);
}

/* The configuration printed for each client runs as printed. */
Test(mcp, print_config_for_each_client_runs)
{
    char *dir = tu_tmpdir();
    make_ledger(dir);
    static const char *const clients[] = {"claude-desktop", "vscode", "cursor",
                                          "claude-code"};
    for (size_t i = 0; i < 4; i++) {
        struct tu_run r = tu_forumv(NULL, "--ledger", dir, "mcp",
                                    "--print-config", clients[i], NULL);
        cr_assert_eq(r.status, 0, "%s", r.err);
        cJSON *cfg = tu_run_json(&r);
        const cJSON *servers = cJSON_GetObjectItemCaseSensitive(
            cfg, i == 1 ? "servers" : "mcpServers");
        const cJSON *srv = cJSON_GetObjectItemCaseSensitive(servers, "forum");
        cr_assert_not_null(srv, "%s: %s", clients[i], r.out);
        const char *cmd = str_of(srv, "command");
        cr_assert(cmd && cmd[0] == '/', "%s: command %s", clients[i], cmd);
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(srv, "args");
        cr_assert_eq(cJSON_GetArraySize(args), 3);
        /* run it as the client would: the args after the binary */
        const char *argv[8] = {0};
        size_t n = 0;
        const cJSON *a;
        cJSON_ArrayForEach (a, args)
            argv[n++] = a->valuestring;
        cr_assert(argv[1][0] == '/', "ledger path not absolute: %s", argv[1]);
        const char *in = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";
        struct tu_run m = tu_forumv(in, argv[0], argv[1], argv[2], NULL);
        cr_assert_eq(m.status, 0, "%s", m.err);
        cr_assert(strstr(m.out, "\"id\":1"), "%s", m.out);
        tu_run_free(&m);
        cJSON_Delete(cfg);
        tu_run_free(&r);
    }
    tu_rmrf(dir);
}

/* ---- outputSchema ------------------------------------------------------ */

/* Checks v against schema for the subset the table's output schemas use:
 * type (a name or a list; integer is a number without a fraction),
 * properties, required, items, additionalProperties (a schema), enum (of
 * strings) and minimum. On failure: 0, and why (at path) in why. */
/* v is of JSON Schema type name (of the subset below). */
static int type_is(const cJSON *v, const char *name)
{
    if (!strcmp(name, "integer"))
        return cJSON_IsNumber(v) &&
               v->valuedouble == (double)(long long)v->valuedouble;
    if (!strcmp(name, "number"))
        return cJSON_IsNumber(v);
    if (!strcmp(name, "object"))
        return cJSON_IsObject(v);
    if (!strcmp(name, "array"))
        return cJSON_IsArray(v);
    if (!strcmp(name, "string"))
        return cJSON_IsString(v);
    if (!strcmp(name, "boolean"))
        return cJSON_IsBool(v);
    cr_assert_str_eq(name, "null", "type %s: not in the subset", name);
    return cJSON_IsNull(v);
}

static int conforms(const cJSON *v, const cJSON *schema, const char *path,
                    char *why, size_t cap)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    if (type) {
        int ok = 0;
        if (cJSON_IsArray(type)) {
            const cJSON *t;
            cJSON_ArrayForEach (t, type)
                ok |= type_is(v, t->valuestring);
        } else {
            ok = type_is(v, type->valuestring);
        }
        if (!ok) {
            char *s = cJSON_PrintUnformatted(v);
            snprintf(why, cap, "%s: %.80s is not of the type asked", path, s);
            free(s);
            return 0;
        }
    }
    const cJSON *min = cJSON_GetObjectItemCaseSensitive(schema, "minimum");
    if (min && cJSON_IsNumber(v) && v->valuedouble < min->valuedouble) {
        snprintf(why, cap, "%s: below the minimum", path);
        return 0;
    }
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(schema, "enum");
    if (en) {
        int found = 0;
        const cJSON *x;
        cJSON_ArrayForEach (x, en)
            found |=
                cJSON_IsString(v) && !strcmp(x->valuestring, v->valuestring);
        if (!found) {
            snprintf(why, cap, "%s: not one of the enum", path);
            return 0;
        }
    }
    char sub[256];
    if (cJSON_IsObject(v)) {
        const cJSON *props =
            cJSON_GetObjectItemCaseSensitive(schema, "properties");
        const cJSON *r;
        cJSON_ArrayForEach (
            r, cJSON_GetObjectItemCaseSensitive(schema, "required"))
            if (!cJSON_GetObjectItemCaseSensitive(v, r->valuestring)) {
                snprintf(why, cap, "%s: no %s (required)", path,
                         r->valuestring);
                return 0;
            }
        const cJSON *extra =
            cJSON_GetObjectItemCaseSensitive(schema, "additionalProperties");
        const cJSON *m;
        cJSON_ArrayForEach (m, v) {
            const cJSON *ps =
                cJSON_GetObjectItemCaseSensitive(props, m->string);
            snprintf(sub, sizeof(sub), "%s.%s", path, m->string);
            if (ps ? !conforms(m, ps, sub, why, cap)
                   : cJSON_IsObject(extra) &&
                         !conforms(m, extra, sub, why, cap))
                return 0;
        }
    }
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(schema, "items");
    if (cJSON_IsArray(v) && items) {
        int i = 0;
        const cJSON *x;
        cJSON_ArrayForEach (x, v) {
            snprintf(sub, sizeof(sub), "%s[%d]", path, i++);
            if (!conforms(x, items, sub, why, cap))
                return 0;
        }
    }
    return 1;
}

/* The reply of id (a number) among v, or NULL. */
static const cJSON *reply_of(cJSON **v, size_t n, double id)
{
    for (size_t k = 0; k < n; k++) {
        const cJSON *vid = cJSON_GetObjectItemCaseSensitive(v[k], "id");
        if (cJSON_IsNumber(vid) && vid->valuedouble == id)
            return v[k];
    }
    return NULL;
}

/* Every tool that declares an outputSchema in tools/list answers a real
 * call with structuredContent that conforms to it; the schema is an object
 * whose properties are all described; dropping any field the schema
 * requires makes the validator (and so a client) refuse it. The ledger is
 * make_ledger's, with a run waiting at a gate after it, so gate_list and
 * run_get's gate carry real items. */
Test(mcp, output_schemas_hold_for_real_results, .timeout = 120)
{
    static const char *const must[] = {
        "health",         "status",        "ledger_get",        "ledger_range",
        "ledger_summary", "ledger_append", "ledger_checkpoint", "ledger_prove",
        "run_start",      "run_get",       "run_list",          "gate_list",
        "session_list",   "route"};
    /* calls after the table's own, on what the table's calls left */
    static const char *const again[][2] = {
        {"gate_list", "{}"},
        {"run_get", "{\"run\":3}"},
        {"session_list", "{}"},
        {"run_list", "{}"},
        {"ledger_verify", "{\"deep\":true}"},
        {"ledger_get", "{\"seq\":2}"},
    };
    /* errors: of a tool with an outputSchema, in the text only; of one
     * without, also as structuredContent */
    static const char *const errs[][2] = {
        {"ledger_get", "{}"},
        {"run_get", "{\"run\":99999}"},
        {"run_show", "{}"},
    };
    char *dir = tu_tmpdir();
    make_ledger(dir);
    cli_ok(dir, "append", "--actor", "client", "--kind", "request", "--payload",
           "{\"request\":\"ship it\",\"via\":\"submit\"}");
    struct tu_run pr = tu_forumv(
        NULL, "--ledger", dir, "ledger", "append", "--actor", "orchestrator",
        "--kind", "gate_requested", "--parent", "3", "--payload",
        "{\"run\":3,\"wave\":0,\"tasks\":[{\"id\":\"T1\",\"agent\":"
        "\"backend\",\"instruction\":\"x\"}],\"question\":\"go?\","
        "\"rule\":\"all\",\"on_expiry\":\"reject\"}",
        NULL);
    cr_assert_eq(pr.status, 0, "%s", pr.err);
    tu_run_free(&pr);
    size_t n;
    const struct surf_method *m = surf_methods(&n);
    struct fo_buf in;
    fo_buf_init(&in, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_buf_printf(&in, "{\"jsonrpc\":\"2.0\",\"id\":\"list\","
                                    "\"method\":\"tools/list\"}\n"),
                 FO_OK);
    for (size_t i = 0; i < n; i++)
        if (!tu_method_skip(&m[i]))
            cr_assert_eq(
                fo_buf_printf(&in,
                              "{\"jsonrpc\":\"2.0\",\"id\":%zu,\"method\":"
                              "\"tools/call\",\"params\":{\"name\":\"%s\","
                              "\"arguments\":%s}}\n",
                              i, m[i].name, args_for(&m[i])),
                FO_OK);
    size_t nagain = sizeof(again) / sizeof(again[0]);
    for (size_t k = 0; k < nagain; k++)
        cr_assert_eq(fo_buf_printf(&in,
                                   "{\"jsonrpc\":\"2.0\",\"id\":%zu,"
                                   "\"method\":\"tools/call\",\"params\":{"
                                   "\"name\":\"%s\",\"arguments\":%s}}\n",
                                   1000 + k, again[k][0], again[k][1]),
                     FO_OK);
    size_t nerrs = sizeof(errs) / sizeof(errs[0]);
    for (size_t k = 0; k < nerrs; k++)
        cr_assert_eq(fo_buf_printf(&in,
                                   "{\"jsonrpc\":\"2.0\",\"id\":%zu,"
                                   "\"method\":\"tools/call\",\"params\":{"
                                   "\"name\":\"%s\",\"arguments\":%s}}\n",
                                   2000 + k, errs[k][0], errs[k][1]),
                     FO_OK);
    struct tu_run r = run_mcp(dir, in.data, in.len, 1);
    cr_assert_eq(r.status, 0, "%s", r.err);
    size_t nl;
    cJSON **v = reply_lines(&r, &nl);
    for (size_t k = 0; k < nerrs; k++) {
        const cJSON *line = reply_of(v, nl, 2000.0 + (double)k);
        cr_assert_not_null(line, "no reply to %s", errs[k][0]);
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(line, "result");
        int schema = surf_output_schema(surf_find(errs[k][0])) != NULL;
        cr_assert_eq(
            cJSON_GetObjectItemCaseSensitive(res, "structuredContent") == NULL,
            schema, "%s: %s", errs[k][0], canon(res));
        const cJSON *e = tool_content(line, 1);
        cr_assert_str_eq(str_of(e, "code"),
                         k == 1 ? "not_found" : "invalid_input", "%s",
                         errs[k][0]);
    }
    const cJSON *list = NULL;
    for (size_t k = 0; k < nl && !list; k++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(v[k], "id");
        if (cJSON_IsString(id) && !strcmp(id->valuestring, "list"))
            list = v[k];
    }
    cr_assert_not_null(list);
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(list, "result"), "tools");
    for (size_t k = 0; k < sizeof(must) / sizeof(must[0]); k++)
        cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(
                               find_tool(tools, must[k]), "outputSchema"),
                           "%s: no outputSchema", must[k]);
    size_t checked = 0, gates = 0;
    char why[512];
    /* each call: its tool's reply, and the tool's schema */
    for (size_t c = 0; c < n + nagain; c++) {
        const char *name = c < n ? m[c].name : again[c - n][0];
        if (c < n && tu_method_skip(&m[c]))
            continue;
        const cJSON *os = cJSON_GetObjectItemCaseSensitive(
            find_tool(tools, name), "outputSchema");
        cr_assert_eq(os != NULL, surf_output_schema(surf_find(name)) != NULL,
                     "%s: tools/list and the table disagree", name);
        if (!os)
            continue;
        cr_assert_str_eq(str_of(os, "type"), "object", "%s", name);
        const cJSON *p;
        cJSON_ArrayForEach (p,
                            cJSON_GetObjectItemCaseSensitive(os, "properties"))
            cr_assert(cJSON_IsString(
                          cJSON_GetObjectItemCaseSensitive(p, "description")),
                      "%s: output %s: no description", name, p->string);
        const cJSON *line =
            reply_of(v, nl, c < n ? (double)c : 1000.0 + (double)(c - n));
        cr_assert_not_null(line, "no reply to %s", name);
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(line, "result");
        cr_assert(
            cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(res, "isError")),
            "%s failed: %s", name, canon(res));
        const cJSON *sc =
            cJSON_GetObjectItemCaseSensitive(res, "structuredContent");
        cr_assert(conforms(sc, os, name, why, sizeof(why)), "%s: %s\n%s", name,
                  why, canon(sc));
        checked++;
        if (!strcmp(name, "gate_list"))
            gates += (size_t)cJSON_GetArraySize(
                cJSON_GetObjectItemCaseSensitive(sc, "gates"));
        /* the validator is not vacuous: without a required field, no */
        const cJSON *req;
        cJSON_ArrayForEach (req,
                            cJSON_GetObjectItemCaseSensitive(os, "required")) {
            cJSON *cut = cJSON_Duplicate(sc, 1);
            cJSON_DeleteItemFromObjectCaseSensitive(cut, req->valuestring);
            cr_assert_not(conforms(cut, os, name, why, sizeof(why)),
                          "%s without %s still conforms", name,
                          req->valuestring);
            cJSON_Delete(cut);
        }
    }
    cr_assert_geq(checked, sizeof(must) / sizeof(must[0]) + nagain);
    cr_assert_eq(gates, 2, "the gated run's gate, in both gate_list calls");
    /* a wrong type is refused too */
    cJSON *bad = cJSON_Parse("{\"ok\":\"yes\"}");
    cr_assert_not(conforms(bad, surf_output_schema(surf_find("health")),
                           "health", why, sizeof(why)));
    cJSON_Delete(bad);
    free_lines(v, nl);
    fo_buf_release(&in);
    tu_run_free(&r);
    tu_rmrf(dir);
}
