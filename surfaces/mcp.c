/* mcp: the MCP server: newline-delimited JSON-RPC 2.0 read with blocking
 * read() from one descriptor and answered on another, one write a message.
 * Every row of the handler table is a tool; surf_call does the work. */
#include "surfaces/mcp.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ledger/fo_json.h"

#define READ_CHUNK 65536
/* The largest single reply; past it the reply becomes a -32603 error. */
#define REPLY_MAX (64u << 20)
/* A batch answers at most this many messages and this many bytes. */
#define BATCH_COUNT_MAX 1000
#define BATCH_BYTES_MAX (64u << 20)

static const char *const versions[] = {"2024-11-05", "2025-03-26", "2025-06-18",
                                       "2025-11-25"};
/* The one version under which JSON-RPC batches are part of MCP. */
#define BATCH_VERSION "2025-03-26"

/* Sent when even an error reply cannot be built. */
static const char oom_reply[] = "{\"error\":{\"code\":-32603,\"message\":"
                                "\"out of memory\"},\"id\":null,"
                                "\"jsonrpc\":\"2.0\"}";

struct mcp {
    struct surf_ctx *ctx;
    int out_fd;
    unsigned flags;
    const char *version; /* negotiated; NULL before initialize */
    struct fo_buf tmp;   /* one serialised reply */
    struct fo_buf out;   /* what goes out in one write */
};

static void log_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_msg(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("forum mcp: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Cuts s back to its longest valid UTF-8 prefix, so a message truncated in
 * the middle of a character can still be written as JSON. */
static void utf8_trim(char *s)
{
    size_t len = strlen(s);
    while (len > 0 && !fo_utf8_valid(s, len))
        len--;
    s[len] = '\0';
}

/* {"jsonrpc": "2.0", "id": id-or-null}: the envelope of every reply. A
 * numeric id goes back as the text it was sent as (9007199254740993 and 1e2
 * unchanged), written raw from what our parser kept (FO_JSON_NUMBER_TEXT). */
static cJSON *envelope(const cJSON *id)
{
    cJSON *r = cJSON_CreateObject();
    cJSON *idv = !id ? cJSON_CreateNull()
                 : cJSON_IsNumber(id) && id->valuestring
                     ? cJSON_CreateRaw(id->valuestring)
                     : cJSON_Duplicate(id, 1);
    if (!r || !idv || !cJSON_AddStringToObject(r, "jsonrpc", "2.0")) {
        cJSON_Delete(r);
        cJSON_Delete(idv);
        return NULL;
    }
    cJSON_AddItemToObject(r, "id", idv);
    return r;
}

/* A JSON-RPC error reply; NULL when out of memory. */
static cJSON *rpc_error(const cJSON *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cJSON *rpc_error(const cJSON *id, int code, const char *fmt, ...)
{
    char msg[FO_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    utf8_trim(msg);
    cJSON *r = envelope(id);
    cJSON *e = cJSON_CreateObject();
    if (!r || !e || !fo_json_add_int(e, "code", code) ||
        !cJSON_AddStringToObject(e, "message", msg)) {
        cJSON_Delete(r);
        cJSON_Delete(e);
        return NULL;
    }
    cJSON_AddItemToObject(r, "error", e);
    return r;
}

/* A JSON-RPC result reply; takes result (freed on failure). */
static cJSON *rpc_result(const cJSON *id, cJSON *result)
{
    cJSON *r = result ? envelope(id) : NULL;
    if (!r) {
        cJSON_Delete(result);
        return NULL;
    }
    cJSON_AddItemToObject(r, "result", result);
    return r;
}

/* Serialises reply into s->tmp (with a newline when nl). A reply that cannot
 * be written (too large, too deep) is first retried without its
 * structuredContent (the text content carries the same object), then
 * replaced by a -32603 error for the same id, then by oom_reply. */
static void serialize(struct mcp *s, cJSON *reply, int nl)
{
    struct fo_err e;
    fo_buf_reset(&s->tmp);
    int rc = fo_json_write(reply, FO_JSON_WRITE_RAW, &s->tmp, &e);
    if (rc == FO_OK && nl)
        rc = fo_buf_putc(&s->tmp, '\n');
    cJSON *result = cJSON_GetObjectItemCaseSensitive(reply, "result");
    if (rc != FO_OK &&
        cJSON_GetObjectItemCaseSensitive(result, "structuredContent")) {
        cJSON_DeleteItemFromObjectCaseSensitive(result, "structuredContent");
        fo_buf_reset(&s->tmp);
        rc = fo_json_write(reply, FO_JSON_WRITE_RAW, &s->tmp, &e);
        if (rc == FO_OK && nl)
            rc = fo_buf_putc(&s->tmp, '\n');
    }
    if (rc != FO_OK) {
        log_msg("cannot send a reply: %s", e.msg);
        cJSON *fb =
            rpc_error(cJSON_GetObjectItemCaseSensitive(reply, "id"),
                      SURF_MCP_INTERNAL_ERROR, "cannot send the reply: %s",
                      rc == FO_E_TOO_LARGE ? "over 64 MiB" : e.msg);
        fo_buf_reset(&s->tmp);
        rc =
            fb ? fo_json_write(fb, FO_JSON_WRITE_RAW, &s->tmp, &e) : FO_E_NOMEM;
        if (rc == FO_OK && nl)
            rc = fo_buf_putc(&s->tmp, '\n');
        cJSON_Delete(fb);
    }
    if (rc != FO_OK) {
        fo_buf_reset(&s->tmp);
        /* Cannot fail: tmp's maximum is far above this. */
        rc = fo_buf_puts(&s->tmp, oom_reply);
        if (rc == FO_OK && nl)
            rc = fo_buf_putc(&s->tmp, '\n');
        if (rc != FO_OK)
            s->tmp.len = 0; /* no memory at all: nothing to send */
    }
}

static int write_all(int fd, const char *p, size_t len, struct fo_err *err)
{
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return fo_err_set(err, FO_E_IO, "writing the output: %s",
                              w < 0 ? strerror(errno) : "short write");
        p += w;
        len -= (size_t)w;
    }
    return FO_OK;
}

/* Sends one reply (consumed) as one line. */
static int send_reply(struct mcp *s, cJSON *reply, struct fo_err *err)
{
    int rc = FO_OK;
    if (reply) {
        serialize(s, reply, 1);
        cJSON_Delete(reply);
    } else {
        fo_buf_reset(&s->tmp);
        if (fo_buf_puts(&s->tmp, oom_reply) || fo_buf_putc(&s->tmp, '\n'))
            s->tmp.len = 0;
    }
    if (s->tmp.len)
        rc = write_all(s->out_fd, s->tmp.data, s->tmp.len, err);
    return rc;
}

/* ---- methods ------------------------------------------------------------ */

static cJSON *do_initialize(struct mcp *s, const cJSON *id, const cJSON *params)
{
    const cJSON *pv =
        cJSON_GetObjectItemCaseSensitive(params, "protocolVersion");
    const char *ver = SURF_MCP_LATEST;
    for (size_t i = 0;
         cJSON_IsString(pv) && i < sizeof(versions) / sizeof(versions[0]); i++)
        if (strcmp(pv->valuestring, versions[i]) == 0)
            ver = versions[i];
    s->version = ver;
    cJSON *r = cJSON_CreateObject();
    cJSON *caps = cJSON_AddObjectToObject(r, "capabilities");
    cJSON *tools = cJSON_AddObjectToObject(caps, "tools");
    cJSON *info = cJSON_AddObjectToObject(r, "serverInfo");
    if (!r || !caps || !tools || !info ||
        !cJSON_AddFalseToObject(tools, "listChanged") ||
        !cJSON_AddStringToObject(info, "name", "forum") ||
        !cJSON_AddStringToObject(info, "version", SURF_MCP_SERVER_VERSION) ||
        !cJSON_AddStringToObject(r, "protocolVersion", ver) ||
        !cJSON_AddStringToObject(
            r, "instructions",
            "forum keeps a verifiable ledger of agent steps: ledger_append "
            "witnesses a step, ledger_verify checks the whole log.")) {
        cJSON_Delete(r);
        return NULL;
    }
    return rpc_result(id, r);
}

static int offered(const struct mcp *s, const struct surf_method *m)
{
    return !(m->flags & SURF_ADMIN) || (s->flags & SURF_MCP_ADMIN);
}

static cJSON *do_tools_list(struct mcp *s, const cJSON *id)
{
    size_t n;
    const struct surf_method *t = surf_methods(&n);
    cJSON *r = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(r, "tools");
    if (!arr) {
        cJSON_Delete(r);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (!offered(s, &t[i]))
            continue;
        cJSON *tool = cJSON_CreateObject();
        cJSON *schema = cJSON_Duplicate(surf_schema(&t[i]), 1);
        if (!tool || !schema ||
            !cJSON_AddStringToObject(tool, "name", t[i].name) ||
            !cJSON_AddStringToObject(tool, "description", t[i].summary)) {
            cJSON_Delete(tool);
            cJSON_Delete(schema);
            cJSON_Delete(r);
            return NULL;
        }
        cJSON_AddItemToObject(tool, "inputSchema", schema);
        cJSON_AddItemToArray(arr, tool);
    }
    return rpc_result(id, r);
}

/* The CallToolResult for obj (consumed): its canonical text, the object as
 * structuredContent, and isError. */
static cJSON *tool_result(const cJSON *id, cJSON *obj, int is_error)
{
    struct fo_buf text;
    struct fo_err e;
    cJSON *r = NULL;
    fo_buf_init(&text, REPLY_MAX);
    if (!obj)
        goto out;
    if (fo_json_canon(obj, &text, &e) != FO_OK) {
        cJSON *reply = rpc_error(id, SURF_MCP_INTERNAL_ERROR,
                                 "cannot write the result: %s", e.msg);
        cJSON_Delete(obj);
        fo_buf_release(&text);
        return reply;
    }
    r = cJSON_CreateObject();
    cJSON *content = cJSON_AddArrayToObject(r, "content");
    cJSON *item = cJSON_CreateObject();
    if (!content || !item || !cJSON_AddStringToObject(item, "type", "text") ||
        !cJSON_AddStringToObject(item, "text", text.data)) {
        cJSON_Delete(item);
        cJSON_Delete(r);
        r = NULL;
        goto out;
    }
    cJSON_AddItemToArray(content, item);
    if (!cJSON_AddBoolToObject(r, "isError", is_error)) {
        cJSON_Delete(r);
        r = NULL;
        goto out;
    }
    cJSON_AddItemToObject(r, "structuredContent", obj);
    obj = NULL;
out:
    cJSON_Delete(obj);
    fo_buf_release(&text);
    return r ? rpc_result(id, r) : NULL;
}

static cJSON *do_tools_call(struct mcp *s, const cJSON *id, const cJSON *params)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(params, "name");
    if (!cJSON_IsString(name))
        return rpc_error(id, SURF_MCP_INVALID_PARAMS,
                         "tools/call: params.name must be a string");
    const struct surf_method *m = surf_find(name->valuestring);
    if (!m || !offered(s, m))
        return rpc_error(id, SURF_MCP_INVALID_PARAMS, "unknown tool: %.64s",
                         name->valuestring);
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(params, "arguments");
    if (cJSON_IsNull(args))
        args = NULL;
    struct fo_err err;
    fo_err_clear(&err);
    int rc = FO_OK;
    if (args) {
        /* The method's input cap, on the canonical form of the arguments
         * (HTTP applies it to the request body). */
        struct fo_buf b;
        fo_buf_init(&b, m->max_input);
        rc = fo_json_canon(args, &b, &err);
        fo_buf_release(&b);
        if (rc == FO_E_TOO_LARGE)
            rc = fo_err_set(&err, FO_E_INPUT_TOO_LARGE,
                            "input: over %zu bytes for %s", m->max_input,
                            m->name);
    }
    cJSON *out = NULL;
    if (rc == FO_OK)
        rc = surf_call(s->ctx, m, args, &out, &err);
    if (rc == FO_OK)
        return tool_result(id, out, 0);
    utf8_trim(err.msg);
    return tool_result(id, surf_error_json(&err), 1);
}

/* Handles one message (not a batch). *reply is the reply to send, or NULL
 * for none (a notification, a response). FO_E_NOMEM when a reply is owed
 * but could not be built. */
static int handle(struct mcp *s, const cJSON *msg, cJSON **reply)
{
    *reply = NULL;
    if (!cJSON_IsObject(msg)) {
        *reply = rpc_error(NULL, SURF_MCP_INVALID_REQUEST,
                           "a message must be a JSON object");
        return *reply ? FO_OK : FO_E_NOMEM;
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
    const cJSON *jv = cJSON_GetObjectItemCaseSensitive(msg, "jsonrpc");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");

    if (id && !cJSON_IsString(id) && !cJSON_IsNumber(id)) {
        *reply = rpc_error(NULL, SURF_MCP_INVALID_REQUEST,
                           "id must be a string or a number");
    } else if (!method && (cJSON_GetObjectItemCaseSensitive(msg, "result") ||
                           cJSON_GetObjectItemCaseSensitive(msg, "error"))) {
        /* A response: we send no requests, so nothing waits for it. */
        log_msg("ignored a response from the client");
        return FO_OK;
    } else if (!cJSON_IsString(jv) || strcmp(jv->valuestring, "2.0") != 0) {
        *reply =
            rpc_error(id, SURF_MCP_INVALID_REQUEST, "jsonrpc must be \"2.0\"");
    } else if (!method) {
        *reply = rpc_error(id, SURF_MCP_INVALID_REQUEST, "missing method");
    } else if (!cJSON_IsString(method)) {
        *reply =
            rpc_error(id, SURF_MCP_INVALID_REQUEST, "method must be a string");
    } else if (!id) {
        return FO_OK; /* a notification: never answered */
    } else if (params && !cJSON_IsObject(params)) {
        *reply =
            rpc_error(id, SURF_MCP_INVALID_PARAMS, "params must be an object");
    } else if (!strcmp(method->valuestring, "initialize")) {
        *reply = do_initialize(s, id, params);
    } else if (!strcmp(method->valuestring, "ping")) {
        *reply = rpc_result(id, cJSON_CreateObject());
    } else if (!strcmp(method->valuestring, "tools/list")) {
        *reply = do_tools_list(s, id);
    } else if (!strcmp(method->valuestring, "tools/call")) {
        *reply = do_tools_call(s, id, params);
    } else {
        *reply = rpc_error(id, SURF_MCP_METHOD_NOT_FOUND,
                           "method not found: %.64s", method->valuestring);
    }
    return *reply ? FO_OK : FO_E_NOMEM;
}

/* A batch (2025-03-26 only): one array of the replies, notifications left
 * out, nothing at all when every message was a notification. */
static int serve_batch(struct mcp *s, const cJSON *batch, struct fo_err *err)
{
    int count = 0;
    const cJSON *msg;
    fo_buf_reset(&s->out);
    if (fo_buf_putc(&s->out, '['))
        return send_reply(s, NULL, err);
    cJSON_ArrayForEach (msg, batch) {
        cJSON *reply = NULL;
        int rc = handle(s, msg, &reply);
        if (rc == FO_OK && !reply)
            continue;
        if (reply) {
            serialize(s, reply, 0);
            cJSON_Delete(reply);
        } else {
            fo_buf_reset(&s->tmp);
            if (fo_buf_puts(&s->tmp, oom_reply))
                s->tmp.len = 0;
        }
        if (s->out.len + s->tmp.len > BATCH_BYTES_MAX) {
            /* The batch answer is full: the rest get a short error. */
            cJSON *r =
                rpc_error(cJSON_IsObject(msg)
                              ? cJSON_GetObjectItemCaseSensitive(msg, "id")
                              : NULL,
                          SURF_MCP_INTERNAL_ERROR, "batch reply over 64 MiB");
            serialize(s, r, 0);
            cJSON_Delete(r);
        }
        if (!s->tmp.len)
            continue;
        if ((count > 0 && fo_buf_putc(&s->out, ',')) ||
            fo_buf_append(&s->out, s->tmp.data, s->tmp.len))
            return send_reply(s, NULL, err);
        count++;
    }
    if (count == 0)
        return FO_OK;
    if (fo_buf_puts(&s->out, "]\n"))
        return send_reply(s, NULL, err);
    return write_all(s->out_fd, s->out.data, s->out.len, err);
}

/* Keeps the source text FO_JSON_NUMBER_TEXT gave numbers only on the ids
 * of msg (or of each message of a batch), so no handler sees it. */
static void id_text_only(cJSON *msg, int batch)
{
    cJSON *m;
    if (cJSON_IsObject(msg)) {
        cJSON_ArrayForEach (m, msg)
            if (strcmp(m->string, "id") != 0)
                fo_json_drop_number_text(m);
    } else if (batch && cJSON_IsArray(msg)) {
        cJSON_ArrayForEach (m, msg)
            id_text_only(m, 0);
    } else {
        fo_json_drop_number_text(msg);
    }
}

/* Serves one line. Only a failure to write the output is returned. */
static int serve_line(struct mcp *s, const char *line, size_t len,
                      struct fo_err *err)
{
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
        i++;
    if (i == len)
        return FO_OK; /* a blank line is no message */
    cJSON *msg = NULL;
    struct fo_err e;
    cJSON *reply = NULL;
    int rc;
    int parsed =
        fo_json_parse_flags(line, len, FO_JSON_NUMBER_TEXT, &msg, &e) == FO_OK;
    if (parsed)
        id_text_only(msg, 1);
    if (!parsed) {
        reply = rpc_error(NULL, SURF_MCP_PARSE_ERROR, "parse error: %s", e.msg);
    } else if (cJSON_IsArray(msg)) {
        int n = cJSON_GetArraySize(msg);
        if (n == 0)
            reply = rpc_error(NULL, SURF_MCP_INVALID_REQUEST, "empty batch");
        else if (!s->version || strcmp(s->version, BATCH_VERSION) != 0)
            reply = rpc_error(NULL, SURF_MCP_INVALID_REQUEST,
                              "batches are accepted only under protocol "
                              "version " BATCH_VERSION);
        else if (n > BATCH_COUNT_MAX)
            reply =
                rpc_error(NULL, SURF_MCP_INVALID_REQUEST,
                          "batch of more than %d messages", BATCH_COUNT_MAX);
        else {
            rc = serve_batch(s, msg, err);
            cJSON_Delete(msg);
            return rc;
        }
    } else {
        if (handle(s, msg, &reply) == FO_OK && !reply) {
            cJSON_Delete(msg);
            return FO_OK;
        }
    }
    cJSON_Delete(msg);
    return send_reply(s, reply, err);
}

int surf_mcp_run(struct surf_ctx *ctx, int in_fd, int out_fd, unsigned flags,
                 struct fo_err *err)
{
    struct mcp s = {.ctx = ctx, .out_fd = out_fd, .flags = flags};
    struct fo_buf line;
    int discarding = 0; /* inside a line over the cap */
    int rc = FO_E_NOMEM;
    char *chunk = malloc(READ_CHUNK);

    fo_buf_init(&line, SURF_MCP_LINE_MAX);
    fo_buf_init(&s.tmp, REPLY_MAX + 1);
    fo_buf_init(&s.out, FO_BUF_UNLIMITED); /* bounded by BATCH_*_MAX */
    if (!chunk) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    for (;;) {
        ssize_t n = read(in_fd, chunk, READ_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = fo_err_set(err, FO_E_IO, "reading the input: %s",
                            strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        size_t pos = 0;
        while (pos < (size_t)n) {
            char *nl = memchr(chunk + pos, '\n', (size_t)n - pos);
            size_t seg = nl ? (size_t)(nl - (chunk + pos)) : (size_t)n - pos;
            if (!discarding) {
                int arc = fo_buf_append(&line, chunk + pos, seg);
                if (arc != FO_OK) {
                    discarding = 1;
                    fo_buf_release(&line);
                    rc = send_reply(
                        &s,
                        rpc_error(NULL, SURF_MCP_INVALID_REQUEST, "%s",
                                  arc == FO_E_TOO_LARGE
                                      ? "line over 4 MiB: skipped"
                                      : "out of memory reading a line"),
                        err);
                    if (rc)
                        goto out;
                }
            }
            pos += seg;
            if (nl) {
                pos++;
                if (discarding) {
                    discarding = 0;
                } else {
                    rc = serve_line(&s, line.data, line.len, err);
                    if (rc)
                        goto out;
                }
                fo_buf_reset(&line);
            }
        }
    }
    if (!discarding && line.len > 0) {
        rc = serve_line(&s, line.data, line.len, err);
        if (rc)
            goto out;
    }
    rc = FO_OK;
out:
    fo_buf_release(&s.out);
    fo_buf_release(&s.tmp);
    fo_buf_release(&line);
    free(chunk);
    return rc;
}
