/* mcp_proto: the Model Context Protocol's messages, for the one MCP
 * server (POST/GET/DELETE /mcp, http_mcp.c) and the stdio bridge that
 * carries `forum mcp` to it (cli_mcp_bridge.c). Building replies only: no
 * I/O, no threads, no state beyond what the caller passes. */
#include "surfaces/mcp_proto.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch.h"
#include "ledger/fo_json.h"
#include "surfaces/mcp_res.h"

#define ELICIT_TASKS_MAX 8 /* tasks an elicitation offers to edit */
/* The largest single reply; past it the reply becomes a -32603 error. */
#define REPLY_MAX (64u << 20)

/* Sent when even an error reply cannot be built. */
static const char oom_reply[] = "{\"error\":{\"code\":-32603,\"message\":"
                                "\"out of memory\"},\"id\":null,"
                                "\"jsonrpc\":\"2.0\"}";

const char *const mcp_versions[MCP_NVERSIONS] = {"2024-11-05", "2025-03-26",
                                                 "2025-06-18", "2025-11-25"};

const char *mcp_version_known(const char *v)
{
    for (size_t i = 0; v && i < MCP_NVERSIONS; i++)
        if (strcmp(v, mcp_versions[i]) == 0)
            return mcp_versions[i];
    return NULL;
}

/* Cuts s back to its longest valid UTF-8 prefix, so a message truncated in
 * the middle of a character can still be written as JSON. */
void mcp_utf8_trim(char *s)
{
    size_t len = strlen(s);
    while (len > 0 && !fo_utf8_valid(s, len))
        len--;
    s[len] = '\0';
}

/* {"jsonrpc": "2.0", "id": id-or-null}: the mcp_envelope of every reply. A
 * numeric id goes back as the text it was sent as (9007199254740993 and 1e2
 * unchanged), written raw from what our parser kept (FO_JSON_NUMBER_TEXT). */
cJSON *mcp_envelope(const cJSON *id)
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
cJSON *mcp_rpc_error(const cJSON *id, int code, const char *fmt, ...)
{
    char msg[FO_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    mcp_utf8_trim(msg);
    cJSON *r = mcp_envelope(id);
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
cJSON *mcp_rpc_result(const cJSON *id, cJSON *result)
{
    cJSON *r = result ? mcp_envelope(id) : NULL;
    if (!r) {
        cJSON_Delete(result);
        return NULL;
    }
    cJSON_AddItemToObject(r, "result", result);
    return r;
}

/* Serialises reply into *tmp (with a newline when nl). A reply that cannot
 * be written (too large, too deep) is first retried without its
 * structuredContent (the text content carries the same object), then
 * replaced by a -32603 error for the same id, then by oom_reply. */
void mcp_serialize(struct fo_buf *tmp, cJSON *reply, int nl)
{
    struct fo_err e;
    fo_buf_reset(tmp);
    int rc = fo_json_write(reply, FO_JSON_WRITE_RAW, tmp, &e);
    if (rc == FO_OK && nl)
        rc = fo_buf_putc(tmp, '\n');
    cJSON *result = cJSON_GetObjectItemCaseSensitive(reply, "result");
    if (rc != FO_OK &&
        cJSON_GetObjectItemCaseSensitive(result, "structuredContent")) {
        cJSON_DeleteItemFromObjectCaseSensitive(result, "structuredContent");
        fo_buf_reset(tmp);
        rc = fo_json_write(reply, FO_JSON_WRITE_RAW, tmp, &e);
        if (rc == FO_OK && nl)
            rc = fo_buf_putc(tmp, '\n');
    }
    if (rc != FO_OK) {
        fprintf(stderr, "forum: cannot send an MCP reply: %s\n", e.msg);
        cJSON *fb =
            mcp_rpc_error(cJSON_GetObjectItemCaseSensitive(reply, "id"),
                          SURF_MCP_INTERNAL_ERROR, "cannot send the reply: %s",
                          rc == FO_E_TOO_LARGE ? "over 64 MiB" : e.msg);
        fo_buf_reset(tmp);
        rc = fb ? fo_json_write(fb, FO_JSON_WRITE_RAW, tmp, &e) : FO_E_NOMEM;
        if (rc == FO_OK && nl)
            rc = fo_buf_putc(tmp, '\n');
        cJSON_Delete(fb);
    }
    if (rc != FO_OK) {
        fo_buf_reset(tmp);
        /* Cannot fail: tmp's maximum is far above this. */
        rc = fo_buf_puts(tmp, oom_reply);
        if (rc == FO_OK && nl)
            rc = fo_buf_putc(tmp, '\n');
        if (rc != FO_OK)
            tmp->len = 0; /* no memory at all: nothing to send */
    }
}

cJSON *mcp_initialize(const cJSON *id, const cJSON *params,
                      struct mcp_peer *peer)
{
    const cJSON *pv =
        cJSON_GetObjectItemCaseSensitive(params, "protocolVersion");
    const char *ver = SURF_MCP_LATEST;
    const char *known =
        cJSON_IsString(pv) ? mcp_version_known(pv->valuestring) : NULL;
    if (known)
        ver = known;
    peer->version = ver;
    const cJSON *caps_in =
        cJSON_GetObjectItemCaseSensitive(params, "capabilities");
    const cJSON *ci = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(params, "clientInfo"), "name");
    peer->elicit_ok = cJSON_IsObject(
        cJSON_GetObjectItemCaseSensitive(caps_in, "elicitation"));
    snprintf(peer->client, sizeof(peer->client), "%s",
             cJSON_IsString(ci) ? ci->valuestring : "an MCP client");
    cJSON *r = cJSON_CreateObject();
    cJSON *caps = cJSON_AddObjectToObject(r, "capabilities");
    cJSON *tools = cJSON_AddObjectToObject(caps, "tools");
    cJSON *res = cJSON_AddObjectToObject(caps, "resources");
    cJSON *prompts = cJSON_AddObjectToObject(caps, "prompts");
    if (res) {
        cJSON_AddFalseToObject(res, "subscribe");
        cJSON_AddFalseToObject(res, "listChanged");
    }
    if (prompts)
        cJSON_AddFalseToObject(prompts, "listChanged");
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
    return mcp_rpc_result(id, r);
}

int mcp_offered(unsigned flags, const struct surf_method *m)
{
    return !(m->flags & SURF_ADMIN) || (flags & SURF_MCP_ADMIN);
}

/* The tools/list entry of method m under name (its own, or an alias:
 * then the title and description say which method answers). NULL when
 * out of memory. */
static cJSON *tool_json(const struct surf_method *m, const char *name)
{
    int alias = strcmp(name, m->name) != 0;
    cJSON *tool = cJSON_CreateObject();
    cJSON *schema = cJSON_Duplicate(surf_schema(m), 1);
    /* the method's hints, as its file gives them, after the title */
    cJSON *ann = cJSON_CreateObject();
    char title[256], desc[2048];
    snprintf(title, sizeof(title), "%s%s%s", m->title,
             alias ? " (the reference's name; forum's is " : "",
             alias ? m->name : "");
    if (alias)
        snprintf(title + strlen(title), sizeof(title) - strlen(title), ")");
    snprintf(desc, sizeof(desc), "%s%s%s", alias ? "The same as " : "",
             alias ? m->name : "", alias ? ": " : "");
    snprintf(desc + strlen(desc), sizeof(desc) - strlen(desc), "%s",
             m->summary);
    int ok = tool && ann && cJSON_AddItemToObject(tool, "annotations", ann);
    if (ok && !cJSON_AddStringToObject(ann, "title", title))
        ok = 0;
    const cJSON *hint;
    cJSON_ArrayForEach (hint, m->annotations)
        if (ok &&
            !cJSON_AddItemToObject(ann, hint->string, cJSON_Duplicate(hint, 0)))
            ok = 0;
    if (!ok || !cJSON_AddStringToObject(tool, "title", title) || !schema ||
        !cJSON_AddStringToObject(tool, "name", name) ||
        !cJSON_AddStringToObject(tool, "description", desc)) {
        if (!tool || !cJSON_GetObjectItemCaseSensitive(tool, "annotations"))
            cJSON_Delete(ann);
        cJSON_Delete(tool);
        cJSON_Delete(schema);
        return NULL;
    }
    cJSON_AddItemToObject(tool, "inputSchema", schema);
    /* the shape of its structuredContent, where it is declared */
    const cJSON *os = surf_output_schema(m);
    cJSON *out = os ? cJSON_Duplicate(os, 1) : NULL;
    if (os && (!out || !cJSON_AddItemToObject(tool, "outputSchema", out))) {
        cJSON_Delete(out);
        cJSON_Delete(tool);
        return NULL;
    }
    return tool;
}

cJSON *mcp_tools_list(const cJSON *id, unsigned flags)
{
    size_t n, na;
    const struct surf_method *t = surf_methods(&n);
    const struct surf_alias *a = surf_aliases(&na);
    cJSON *r = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(r, "tools");
    if (!arr) {
        cJSON_Delete(r);
        return NULL;
    }
    /* forum's own names, then the reference's: each name once */
    for (size_t i = 0; i < n + na; i++) {
        const struct surf_method *m = i < n ? &t[i] : surf_find(a[i - n].name);
        if (!m || !mcp_offered(flags, m))
            continue;
        cJSON *tool = tool_json(m, i < n ? m->name : a[i - n].name);
        if (!tool) {
            cJSON_Delete(r);
            return NULL;
        }
        cJSON_AddItemToArray(arr, tool);
    }
    return mcp_rpc_result(id, r);
}

/* The CallToolResult for obj (consumed): its canonical text, the object as
 * structuredContent, and isError. An error of a tool that declares an
 * outputSchema (params names the tool) is in the text only: a client
 * checks structuredContent against the schema whenever it is there (the
 * official TypeScript SDK does so even with isError), and an error object
 * is not the result the schema describes. */
cJSON *mcp_tool_result(const cJSON *id, const cJSON *params, cJSON *obj,
                       int is_error)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(params, "name");
    const struct surf_method *m =
        cJSON_IsString(name) ? surf_find(name->valuestring) : NULL;
    int structured = !is_error || !m || !surf_output_schema(m);
    struct fo_buf text;
    struct fo_err e;
    cJSON *r = NULL;
    fo_buf_init(&text, REPLY_MAX);
    if (!obj)
        goto out;
    if (fo_json_canon(obj, &text, &e) != FO_OK) {
        cJSON *reply = mcp_rpc_error(id, SURF_MCP_INTERNAL_ERROR,
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
    if (structured) {
        cJSON_AddItemToObject(r, "structuredContent", obj);
        obj = NULL;
    }
out:
    cJSON_Delete(obj);
    fo_buf_release(&text);
    return r ? mcp_rpc_result(id, r) : NULL;
}

const struct surf_method *mcp_tool_args(const cJSON *id, const cJSON *params,
                                        unsigned flags, const cJSON **args,
                                        cJSON **reply)
{
    *reply = NULL;
    *args = NULL;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(params, "name");
    if (!cJSON_IsString(name)) {
        *reply = mcp_rpc_error(id, SURF_MCP_INVALID_PARAMS,
                               "tools/call: params.name must be a string");
        return NULL;
    }
    const struct surf_method *m = surf_find(name->valuestring);
    if (!m || !mcp_offered(flags, m)) {
        *reply = mcp_rpc_error(id, SURF_MCP_INVALID_PARAMS,
                               "unknown tool: %.64s", name->valuestring);
        return NULL;
    }
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(params, "arguments");
    if (cJSON_IsNull(a))
        a = NULL;
    if (a) {
        /* The method's input cap, on the canonical form of the arguments
         * (HTTP applies it to the request body). */
        struct fo_err err;
        struct fo_buf b;
        fo_buf_init(&b, m->max_input);
        int rc = fo_json_canon(a, &b, &err);
        fo_buf_release(&b);
        if (rc == FO_E_TOO_LARGE)
            rc = fo_err_set(&err, FO_E_INPUT_TOO_LARGE,
                            "input: over %zu bytes for %s", m->max_input,
                            m->name);
        if (rc != FO_OK) {
            *reply = mcp_tool_error(id, params, &err);
            return NULL;
        }
    }
    *args = a;
    return m;
}

cJSON *mcp_tool_error(const cJSON *id, const cJSON *params,
                      const struct fo_err *err)
{
    struct fo_err e = *err;
    mcp_utf8_trim(e.msg);
    return mcp_tool_result(id, params, surf_error_json(&e), 1);
}

cJSON *mcp_tools_call(struct surf_ctx *ctx, unsigned flags, const cJSON *id,
                      const cJSON *params)
{
    const cJSON *args;
    cJSON *reply;
    const struct surf_method *m =
        mcp_tool_args(id, params, flags, &args, &reply);
    if (!m)
        return reply;
    struct fo_err err;
    fo_err_clear(&err);
    cJSON *out = NULL;
    int rc = surf_call(ctx, m, args, &out, &err);
    if (rc == FO_OK)
        return mcp_tool_result(id, params, out, 0);
    return mcp_tool_error(id, params, &err);
}

/* The gate's question and its tasks as editable fields: an
 * elicitation/create request. */
cJSON *mcp_elicit_request(const char *id, const cJSON *g, int64_t run)
{
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(g, "question");
    long long wave = 0;
    fo_json_get_int(g, "wave", 0, INT64_MAX, &wave);
    struct fo_buf text;
    fo_buf_init(&text, 64 * 1024);
    fo_buf_printf(&text, "%s\n(run %lld, wave %lld)",
                  cJSON_IsString(q) ? q->valuestring : "Approve this wave?",
                  (long long)run, wave);
    cJSON *props = cJSON_CreateObject();
    cJSON *dec = cJSON_AddObjectToObject(props, "decision");
    cJSON *en = cJSON_AddArrayToObject(dec, "enum");
    cJSON_AddStringToObject(dec, "type", "string");
    cJSON_AddStringToObject(dec, "description",
                            "approve runs the wave; edit runs it with the "
                            "instructions given below; reject ends the run");
    cJSON_AddItemToArray(en, cJSON_CreateString("approve"));
    cJSON_AddItemToArray(en, cJSON_CreateString("edit"));
    cJSON_AddItemToArray(en, cJSON_CreateString("reject"));
    cJSON *reason = cJSON_AddObjectToObject(props, "reason");
    cJSON_AddStringToObject(reason, "type", "string");
    cJSON_AddStringToObject(reason, "description",
                            "why (kept with the "
                            "decision)");
    int n = 0;
    const cJSON *t;
    cJSON_ArrayForEach (t, cJSON_GetObjectItemCaseSensitive(g, "tasks")) {
        const cJSON *tid = cJSON_GetObjectItemCaseSensitive(t, "id");
        const cJSON *ins = cJSON_GetObjectItemCaseSensitive(t, "instruction");
        if (!cJSON_IsString(tid) || !cJSON_IsString(ins))
            continue;
        fo_buf_printf(&text, "\n- %s: %.300s", tid->valuestring,
                      ins->valuestring);
        if (n++ >= ELICIT_TASKS_MAX)
            continue;
        cJSON *f = cJSON_AddObjectToObject(props, tid->valuestring);
        cJSON_AddStringToObject(f, "type", "string");
        cJSON_AddStringToObject(f, "description",
                                "edit: the new instruction of this task "
                                "(empty keeps it)");
    }
    cJSON *r = cJSON_CreateObject();
    cJSON *p = cJSON_AddObjectToObject(r, "params");
    cJSON *schema = cJSON_AddObjectToObject(p, "requestedSchema");
    cJSON *req = cJSON_AddArrayToObject(schema, "required");
    cJSON_AddStringToObject(r, "jsonrpc", "2.0");
    cJSON_AddStringToObject(r, "id", id);
    cJSON_AddStringToObject(r, "method", "elicitation/create");
    cJSON_AddStringToObject(p, "message", text.data ? text.data : "");
    cJSON_AddStringToObject(schema, "type", "object");
    cJSON_AddItemToObject(schema, "properties", props);
    cJSON_AddItemToArray(req, cJSON_CreateString("decision"));
    fo_buf_release(&text);
    return r;
}

/* resources/read and prompts/get: a missing resource is -32002 (the
 * specification's "resource not found"), bad params -32602. */
cJSON *mcp_read_or_prompt(struct surf_ctx *ctx, const cJSON *id,
                          const char *method, const cJSON *params)
{
    int read = !strcmp(method, "resources/read");
    const cJSON *key =
        cJSON_GetObjectItemCaseSensitive(params, read ? "uri" : "name");
    if (!cJSON_IsString(key))
        return mcp_rpc_error(id, SURF_MCP_INVALID_PARAMS,
                             "%s: params.%s must be a string", method,
                             read ? "uri" : "name");
    struct fo_err err;
    fo_err_clear(&err);
    cJSON *out = NULL;
    int rc = read ? mcp_resource_read(ctx, key->valuestring, &out, &err)
                  : mcp_prompt_get(
                        ctx, key->valuestring,
                        cJSON_GetObjectItemCaseSensitive(params, "arguments"),
                        &out, &err);
    if (rc == FO_OK)
        return mcp_rpc_result(id, out);
    mcp_utf8_trim(err.msg);
    return mcp_rpc_error(
        id,
        read && (rc == FO_E_NOT_FOUND || rc == FO_E_NOT_A_RUN) ? -32002
        : rc == FO_E_NOT_FOUND || rc == FO_E_INVALID || rc == FO_E_NOT_A_RUN
            ? SURF_MCP_INVALID_PARAMS
            : SURF_MCP_INTERNAL_ERROR,
        "%s", err.msg);
}

cJSON *mcp_progress(const cJSON *token, const struct orch_run_event *ev)
{
    char msg[FO_ERR_MSG_MAX];
    orch_run_event_text(ev, msg, sizeof(msg));
    cJSON *n = cJSON_CreateObject();
    cJSON *p = cJSON_AddObjectToObject(n, "params");
    if (!p || !cJSON_AddStringToObject(n, "jsonrpc", "2.0") ||
        !cJSON_AddStringToObject(n, "method", "notifications/progress") ||
        !cJSON_AddItemToObject(p, "progressToken", cJSON_Duplicate(token, 1)) ||
        !cJSON_AddNumberToObject(p, "progress", ev->step) ||
        !cJSON_AddStringToObject(p, "message", msg)) {
        cJSON_Delete(n);
        return NULL;
    }
    return n;
}

int mcp_elicit_decision(const cJSON *msg, struct orch_gate_decision *d,
                        cJSON **edits)
{
    *edits = NULL;
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(msg, "result");
    const cJSON *action = cJSON_GetObjectItemCaseSensitive(res, "action");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(res, "content");
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(content, "decision");
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(content, "reason");
    const char *decision = NULL, *reason = NULL;
    if (cJSON_IsString(action) && !strcmp(action->valuestring, "accept") &&
        cJSON_IsString(dec))
        decision = dec->valuestring;
    else if (cJSON_IsString(action) && !strcmp(action->valuestring, "decline"))
        decision = "reject", reason = "declined in the client";
    if (!decision) /* cancelled, or an error: the gate still waits */
        return 0;
    if (cJSON_IsString(why) && *why->valuestring)
        reason = why->valuestring;
    if (!strcmp(decision, "edit")) {
        *edits = cJSON_CreateObject();
        const cJSON *f;
        cJSON_ArrayForEach (f, content)
            if (strcmp(f->string, "decision") && strcmp(f->string, "reason") &&
                cJSON_IsString(f) && *f->valuestring)
                cJSON_AddStringToObject(*edits, f->string, f->valuestring);
        if (!*edits || !(*edits)->child)
            decision = "approve"; /* nothing edited */
    }
    d->decision = decision;
    d->reason = decision[0] == 'r' ? reason : NULL;
    d->note = decision[0] != 'r' ? reason : NULL;
    d->edits = decision[0] == 'e' ? *edits : NULL;
    return 1;
}
