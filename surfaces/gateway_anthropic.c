/* gateway_anthropic: see gateway_anthropic.h. Anthropic Messages to and
 * from OpenAI-compatible chat completions, plain and streamed. */
#include "surfaces/gateway_anthropic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/fo_json.h"

/* ---- helpers ----------------------------------------------------------- */

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = get(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int is_type(const cJSON *block, const char *t)
{
    const char *s = str(block, "type");
    return s && !strcmp(s, t);
}

/* Appends a text block's text (or a plain string) to b, blocks apart by a
 * newline. */
static int put_text(struct fo_buf *b, const char *s)
{
    if (!s)
        return FO_OK;
    if (b->len && fo_buf_putc(b, '\n'))
        return FO_E_NOMEM;
    return fo_buf_puts(b, s) ? FO_E_NOMEM : FO_OK;
}

/* The text of a content value: a string, or the text blocks of an array
 * (other blocks are named in brackets). */
static int content_text(const cJSON *c, struct fo_buf *b)
{
    if (cJSON_IsString(c))
        return put_text(b, c->valuestring);
    const cJSON *blk;
    cJSON_ArrayForEach (blk, c) {
        int rc = is_type(blk, "text")    ? put_text(b, str(blk, "text"))
                 : is_type(blk, "image") ? put_text(b, "[image]")
                                         : FO_OK;
        if (rc)
            return rc;
    }
    return FO_OK;
}

static cJSON *text_of(const cJSON *c)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cJSON *s = NULL;
    if (content_text(c, &b) == FO_OK)
        s = cJSON_CreateString(b.data ? b.data : "");
    fo_buf_release(&b);
    return s;
}

/* ---- the request ------------------------------------------------------- */

/* An image block as a chat content part (a data: URL or the URL). */
static cJSON *image_part(const cJSON *blk)
{
    const cJSON *src = get(blk, "source");
    const char *url = str(src, "url");
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (!url && str(src, "data")) {
        const char *mt = str(src, "media_type");
        if (fo_buf_printf(&b, "data:%s;base64,%s", mt ? mt : "image/png",
                          str(src, "data")) == FO_OK)
            url = b.data;
    }
    cJSON *p = NULL, *iu = NULL;
    if (url && (p = cJSON_CreateObject()) && (iu = cJSON_CreateObject())) {
        cJSON_AddStringToObject(p, "type", "image_url");
        cJSON_AddStringToObject(iu, "url", url);
        cJSON_AddItemToObject(p, "image_url", iu);
    } else {
        cJSON_Delete(p);
        p = NULL;
    }
    fo_buf_release(&b);
    return p;
}

/* A user message: its tool_result blocks become "tool" messages (first,
 * as they answer the assistant's calls just before), the rest one user
 * message (a string, or parts when it holds images). */
static int user_message(const cJSON *content, cJSON *msgs, struct fo_err *err)
{
    if (cJSON_IsString(content)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(msgs, m);
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", content->valuestring);
        return FO_OK;
    }
    if (!cJSON_IsArray(content))
        return fo_err_set(err, FO_E_INVALID,
                          "a message's content is a string or an array");
    const cJSON *blk;
    int images = 0, texts = 0;
    cJSON_ArrayForEach (blk, content) {
        if (is_type(blk, "tool_result")) {
            const char *id = str(blk, "tool_use_id");
            if (!id)
                return fo_err_set(err, FO_E_INVALID,
                                  "a tool_result without tool_use_id");
            cJSON *m = cJSON_CreateObject();
            cJSON_AddItemToArray(msgs, m);
            cJSON_AddStringToObject(m, "role", "tool");
            cJSON_AddStringToObject(m, "tool_call_id", id);
            struct fo_buf b, t;
            fo_buf_init(&b, FO_BUF_UNLIMITED);
            fo_buf_init(&t, FO_BUF_UNLIMITED);
            if (cJSON_IsTrue(get(blk, "is_error")))
                fo_buf_puts(&b, "[error] ");
            content_text(get(blk, "content"), &t);
            fo_buf_puts(&b, t.data ? t.data : "");
            cJSON_AddStringToObject(m, "content", b.data ? b.data : "");
            fo_buf_release(&t);
            fo_buf_release(&b);
        } else if (is_type(blk, "image")) {
            images++;
        } else if (is_type(blk, "text")) {
            texts++;
        }
    }
    if (!images && !texts)
        return FO_OK;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddItemToArray(msgs, m);
    cJSON_AddStringToObject(m, "role", "user");
    if (!images) {
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        cJSON_ArrayForEach (blk, content)
            if (is_type(blk, "text"))
                put_text(&b, str(blk, "text"));
        cJSON_AddStringToObject(m, "content", b.data ? b.data : "");
        fo_buf_release(&b);
        return FO_OK;
    }
    cJSON *parts = cJSON_AddArrayToObject(m, "content");
    cJSON_ArrayForEach (blk, content) {
        cJSON *p = NULL;
        if (is_type(blk, "image")) {
            p = image_part(blk);
        } else if (is_type(blk, "text") && (p = cJSON_CreateObject())) {
            cJSON_AddStringToObject(p, "type", "text");
            cJSON_AddStringToObject(p, "text",
                                    str(blk, "text") ? str(blk, "text") : "");
        }
        if (p)
            cJSON_AddItemToArray(parts, p);
    }
    return FO_OK;
}

/* An assistant message: its text as content, its tool_use blocks as
 * tool_calls (thinking blocks are dropped). */
static int assistant_message(const cJSON *content, cJSON *msgs,
                             struct fo_err *err)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddItemToArray(msgs, m);
    cJSON_AddStringToObject(m, "role", "assistant");
    if (cJSON_IsString(content)) {
        cJSON_AddStringToObject(m, "content", content->valuestring);
        return FO_OK;
    }
    if (!cJSON_IsArray(content))
        return fo_err_set(err, FO_E_INVALID,
                          "a message's content is a string or an array");
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cJSON *calls = NULL;
    const cJSON *blk;
    int rc = FO_OK;
    cJSON_ArrayForEach (blk, content) {
        if (is_type(blk, "text")) {
            put_text(&b, str(blk, "text"));
            continue;
        }
        if (!is_type(blk, "tool_use"))
            continue;
        const char *id = str(blk, "id"), *name = str(blk, "name");
        if (!id || !name) {
            rc = fo_err_set(err, FO_E_INVALID,
                            "a tool_use block needs an id and a name");
            break;
        }
        struct fo_buf args;
        struct fo_err jerr;
        fo_buf_init(&args, FO_BUF_UNLIMITED);
        const cJSON *in = get(blk, "input");
        if (!in || fo_json_canon(in, &args, &jerr) != FO_OK) {
            fo_buf_reset(&args);
            fo_buf_puts(&args, "{}");
        }
        if (!calls)
            calls = cJSON_CreateArray();
        cJSON *tc = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        cJSON_AddStringToObject(tc, "id", id);
        cJSON_AddStringToObject(tc, "type", "function");
        cJSON_AddStringToObject(fn, "name", name);
        cJSON_AddStringToObject(fn, "arguments", args.data ? args.data : "{}");
        cJSON_AddItemToObject(tc, "function", fn);
        cJSON_AddItemToArray(calls, tc);
        fo_buf_release(&args);
    }
    if (b.len || !calls)
        cJSON_AddStringToObject(m, "content", b.data ? b.data : "");
    else
        cJSON_AddNullToObject(m, "content");
    if (calls)
        cJSON_AddItemToObject(m, "tool_calls", calls);
    fo_buf_release(&b);
    return rc;
}

static int tools_of(const cJSON *req, cJSON *out)
{
    const cJSON *tools = get(req, "tools"), *t;
    cJSON *arr = NULL;
    cJSON_ArrayForEach (t, tools) {
        const char *name = str(t, "name");
        const cJSON *schema = get(t, "input_schema");
        if (!name || !cJSON_IsObject(schema))
            continue; /* a server tool (web search, ...): not a function */
        cJSON *ft = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        cJSON_AddStringToObject(ft, "type", "function");
        cJSON_AddStringToObject(fn, "name", name);
        if (str(t, "description"))
            cJSON_AddStringToObject(fn, "description", str(t, "description"));
        cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(schema, 1));
        cJSON_AddItemToObject(ft, "function", fn);
        if (!arr)
            arr = cJSON_AddArrayToObject(out, "tools");
        cJSON_AddItemToArray(arr, ft);
    }
    const cJSON *tc = get(req, "tool_choice");
    const char *kind = str(tc, "type");
    if (!kind)
        return FO_OK;
    if (!strcmp(kind, "auto") || !strcmp(kind, "none"))
        cJSON_AddStringToObject(out, "tool_choice", kind);
    else if (!strcmp(kind, "any"))
        cJSON_AddStringToObject(out, "tool_choice", "required");
    else if (!strcmp(kind, "tool") && str(tc, "name")) {
        cJSON *o = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "function");
        cJSON_AddStringToObject(fn, "name", str(tc, "name"));
        cJSON_AddItemToObject(o, "function", fn);
        cJSON_AddItemToObject(out, "tool_choice", o);
    }
    if (cJSON_IsTrue(get(tc, "disable_parallel_tool_use")) && arr)
        cJSON_AddFalseToObject(out, "parallel_tool_calls");
    return FO_OK;
}

static void copy_number(const cJSON *req, const char *from, cJSON *out,
                        const char *to)
{
    const cJSON *v = get(req, from);
    if (cJSON_IsNumber(v))
        cJSON_AddNumberToObject(out, to, v->valuedouble);
}

int surf_gwa_request(const cJSON *req, const char *model, cJSON **out,
                     struct fo_err *err)
{
    const cJSON *msgs = get(req, "messages");
    if (!cJSON_IsArray(msgs))
        return fo_err_set(err, FO_E_INVALID, "\"messages\" must be an array");
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    cJSON_AddStringToObject(o, "model", model);
    cJSON *cm = cJSON_AddArrayToObject(o, "messages");
    const cJSON *sys = get(req, "system");
    if (sys) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(cm, m);
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddItemToObject(m, "content", text_of(sys));
    }
    int rc = FO_OK;
    const cJSON *m;
    cJSON_ArrayForEach (m, msgs) {
        const char *role = str(m, "role");
        const cJSON *content = get(m, "content");
        if (role && !strcmp(role, "user"))
            rc = user_message(content, cm, err);
        else if (role && !strcmp(role, "assistant"))
            rc = assistant_message(content, cm, err);
        else
            rc = fo_err_set(err, FO_E_INVALID,
                            "a message's role is \"user\" or \"assistant\"");
        if (rc)
            break;
    }
    if (rc == FO_OK)
        rc = tools_of(req, o);
    copy_number(req, "max_tokens", o, "max_tokens");
    copy_number(req, "temperature", o, "temperature");
    copy_number(req, "top_p", o, "top_p");
    const cJSON *stops = get(req, "stop_sequences");
    if (cJSON_IsArray(stops) && cJSON_GetArraySize(stops) > 0)
        cJSON_AddItemToObject(o, "stop", cJSON_Duplicate(stops, 1));
    if (cJSON_IsTrue(get(req, "stream"))) {
        cJSON_AddTrueToObject(o, "stream");
        cJSON *so = cJSON_AddObjectToObject(o, "stream_options");
        cJSON_AddTrueToObject(so, "include_usage");
    }
    if (rc) {
        cJSON_Delete(o);
        return rc;
    }
    *out = o;
    return FO_OK;
}

/* ---- the answer -------------------------------------------------------- */

/* The stop reason of a choice's finish_reason (and its matched stop
 * string, when the provider names one of stops). */
static const char *stop_of(const cJSON *choice, const cJSON *stops,
                           int has_tools, const char **seq)
{
    const char *fr = str(choice, "finish_reason");
    const char *matched = str(choice, "stop_reason");
    *seq = NULL;
    if (fr && !strcmp(fr, "length"))
        return "max_tokens";
    if (has_tools ||
        (fr && (!strcmp(fr, "tool_calls") || !strcmp(fr, "function_call"))))
        return "tool_use";
    if (fr && !strcmp(fr, "content_filter"))
        return "refusal";
    const cJSON *s;
    cJSON_ArrayForEach (s, stops) {
        if (matched && cJSON_IsString(s) && !strcmp(s->valuestring, matched)) {
            *seq = s->valuestring;
            return "stop_sequence";
        }
    }
    return "end_turn";
}

static cJSON *tool_input(const char *args)
{
    cJSON *in = NULL;
    struct fo_err err;
    if (!args || fo_json_parse(args, strlen(args), &in, &err) != FO_OK ||
        !cJSON_IsObject(in)) {
        cJSON_Delete(in);
        in = cJSON_CreateObject();
    }
    return in;
}

static void add_usage(cJSON *o, long long in, long long out)
{
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    fo_json_add_int(u, "input_tokens", in < 0 ? 0 : in);
    fo_json_add_int(u, "output_tokens", out < 0 ? 0 : out);
}

static long long usage_num(const cJSON *u, const char *k)
{
    const cJSON *v = get(u, k);
    /* a hostile count out of range is no count (and no undefined cast) */
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 9e15))
        return -1;
    return (long long)v->valuedouble;
}

static void msg_id(const cJSON *ans, char *out, size_t cap)
{
    const char *id = str(ans, "id");
    snprintf(out, cap, "msg_%.100s", id && id[0] ? id : "forum");
}

int surf_gwa_response(const cJSON *ans, const char *model, const cJSON *stops,
                      cJSON **out, struct fo_err *err)
{
    const cJSON *ch = cJSON_GetArrayItem(get(ans, "choices"), 0);
    const cJSON *msg = get(ch, "message");
    if (!cJSON_IsObject(msg))
        return fo_err_set(err, FO_E_UPSTREAM,
                          "the provider's answer has no choices[0].message");
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    char id[128];
    msg_id(ans, id, sizeof(id));
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON_AddStringToObject(o, "model", model);
    cJSON *content = cJSON_AddArrayToObject(o, "content");
    const char *text = str(msg, "content");
    if (text && text[0]) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddStringToObject(b, "text", text);
        cJSON_AddItemToArray(content, b);
    }
    const cJSON *tc;
    int n = 0;
    cJSON_ArrayForEach (tc, get(msg, "tool_calls")) {
        const cJSON *fn = get(tc, "function");
        const char *name = str(fn, "name");
        if (!name)
            continue;
        char tid[128];
        const char *cid = str(tc, "id");
        snprintf(tid, sizeof(tid), "%.120s", cid ? cid : "");
        if (!cid || !cid[0])
            snprintf(tid, sizeof(tid), "toolu_%.100s_%d", id, n);
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "tool_use");
        cJSON_AddStringToObject(b, "id", tid);
        cJSON_AddStringToObject(b, "name", name);
        cJSON_AddItemToObject(b, "input", tool_input(str(fn, "arguments")));
        cJSON_AddItemToArray(content, b);
        n++;
    }
    const char *seq;
    cJSON_AddStringToObject(o, "stop_reason", stop_of(ch, stops, n > 0, &seq));
    if (seq)
        cJSON_AddStringToObject(o, "stop_sequence", seq);
    else
        cJSON_AddNullToObject(o, "stop_sequence");
    const cJSON *u = get(ans, "usage");
    add_usage(o, usage_num(u, "prompt_tokens"),
              usage_num(u, "completion_tokens"));
    *out = o;
    return FO_OK;
}

const char *surf_gwa_error_type(int status)
{
    switch (status) {
    case 400:
    case 422:
        return "invalid_request_error";
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 529:
        return "overloaded_error";
    default:
        return status >= 400 && status < 500 ? "invalid_request_error"
                                             : "api_error";
    }
}

int surf_gwa_error_body(int status, const char *body, size_t body_len,
                        char **out, size_t *len)
{
    cJSON *j = NULL;
    struct fo_err err;
    const char *msg = NULL;
    if (body && fo_json_parse(body, body_len, &j, &err) == FO_OK) {
        const cJSON *e = get(j, "error");
        msg = cJSON_IsString(e) ? e->valuestring : str(e, "message");
    }
    char dflt[64];
    snprintf(dflt, sizeof(dflt), "the provider answered %d", status);
    cJSON *o = cJSON_CreateObject(), *e = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "error");
    cJSON_AddStringToObject(e, "type", surf_gwa_error_type(status));
    cJSON_AddStringToObject(e, "message", msg ? msg : dflt);
    cJSON_AddItemToObject(o, "error", e);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = fo_json_canon(o, &b, &err);
    cJSON_Delete(o);
    cJSON_Delete(j);
    *out = rc ? NULL : fo_buf_detach(&b, len);
    fo_buf_release(&b);
    return *out ? FO_OK : FO_E_NOMEM;
}

/* ---- the stream -------------------------------------------------------- */

void surf_gwa_stream_init(struct surf_gwa_stream *s, const char *model,
                          const cJSON *stops)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->model, sizeof(s->model), "%s", model);
    snprintf(s->id, sizeof(s->id), "msg_forum");
    s->stops = stops;
    s->open = -1;
    s->tokens_in = s->tokens_out = -1;
    for (int i = 0; i < SURF_GWA_TOOLS_MAX; i++)
        s->tool_block[i] = -1;
}

/* Writes one event (o is freed). */
static int emit(struct fo_buf *out, const char *type, cJSON *o)
{
    struct fo_err err;
    int rc = o ? FO_OK : FO_E_NOMEM;
    if (rc == FO_OK)
        rc = fo_buf_printf(out, "event: %s\ndata: ", type);
    if (rc == FO_OK)
        rc = fo_json_canon(o, out, &err);
    if (rc == FO_OK)
        rc = fo_buf_puts(out, "\n\n");
    cJSON_Delete(o);
    return rc;
}

static cJSON *event(const char *type)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static int start(struct surf_gwa_stream *s, struct fo_buf *out)
{
    if (s->started)
        return FO_OK;
    s->started = 1;
    cJSON *o = event("message_start"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "model", s->model);
    cJSON_AddArrayToObject(m, "content");
    cJSON_AddNullToObject(m, "stop_reason");
    cJSON_AddNullToObject(m, "stop_sequence");
    add_usage(m, s->tokens_in, 0);
    cJSON_AddItemToObject(o, "message", m);
    return emit(out, "message_start", o);
}

static int close_block(struct surf_gwa_stream *s, struct fo_buf *out)
{
    if (s->open < 0)
        return FO_OK;
    cJSON *o = event("content_block_stop");
    fo_json_add_int(o, "index", s->open);
    s->open = -1;
    s->open_tool = 0;
    return emit(out, "content_block_stop", o);
}

/* Opens a block: cb is its content_block (freed). */
static int open_block(struct surf_gwa_stream *s, struct fo_buf *out, cJSON *cb,
                      int tool)
{
    int rc = close_block(s, out);
    if (rc) {
        cJSON_Delete(cb);
        return rc;
    }
    s->open = s->next++;
    s->open_tool = tool;
    cJSON *o = event("content_block_start");
    fo_json_add_int(o, "index", s->open);
    cJSON_AddItemToObject(o, "content_block", cb);
    return emit(out, "content_block_start", o);
}

static int delta(struct surf_gwa_stream *s, struct fo_buf *out,
                 const char *kind, const char *key, const char *val)
{
    cJSON *o = event("content_block_delta"), *d = cJSON_CreateObject();
    fo_json_add_int(o, "index", s->open);
    cJSON_AddStringToObject(d, "type", kind);
    cJSON_AddStringToObject(d, key, val);
    cJSON_AddItemToObject(o, "delta", d);
    return emit(out, "content_block_delta", o);
}

static int text_delta(struct surf_gwa_stream *s, struct fo_buf *out,
                      const char *text)
{
    int rc = FO_OK;
    if (s->open < 0 || s->open_tool) {
        cJSON *cb = cJSON_CreateObject();
        cJSON_AddStringToObject(cb, "type", "text");
        cJSON_AddStringToObject(cb, "text", "");
        rc = open_block(s, out, cb, 0);
    }
    return rc ? rc : delta(s, out, "text_delta", "text", text);
}

/* One entry of a chunk's delta.tool_calls. */
static int tool_delta(struct surf_gwa_stream *s, struct fo_buf *out,
                      const cJSON *tc)
{
    const cJSON *ix = get(tc, "index");
    if (ix && (!cJSON_IsNumber(ix) || !(ix->valuedouble >= 0) ||
               ix->valuedouble >= SURF_GWA_TOOLS_MAX))
        return FO_OK; /* not an index we can hold: the call is dropped */
    int i = ix ? (int)ix->valuedouble : 0;
    const cJSON *fn = get(tc, "function");
    int rc = FO_OK;
    if (s->tool_block[i] < 0) {
        char tid[160];
        const char *cid = str(tc, "id");
        if (cid && cid[0])
            snprintf(tid, sizeof(tid), "%.150s", cid);
        else
            snprintf(tid, sizeof(tid), "toolu_%.100s_%d", s->id, i);
        cJSON *cb = cJSON_CreateObject();
        cJSON_AddStringToObject(cb, "type", "tool_use");
        cJSON_AddStringToObject(cb, "id", tid);
        cJSON_AddStringToObject(cb, "name",
                                str(fn, "name") ? str(fn, "name") : "");
        cJSON_AddObjectToObject(cb, "input");
        rc = open_block(s, out, cb, 1);
        s->tool_block[i] = s->open;
        s->n_tools++;
    }
    const char *args = str(fn, "arguments");
    /* a block closed already cannot take more: Anthropic blocks come one
     * after the other */
    if (rc == FO_OK && args && args[0] && s->tool_block[i] == s->open)
        rc = delta(s, out, "input_json_delta", "partial_json", args);
    return rc;
}

static void take_stop(struct surf_gwa_stream *s, const cJSON *ch)
{
    if (!str(ch, "finish_reason"))
        return;
    const char *seq;
    s->stop_reason = stop_of(ch, s->stops, s->n_tools > 0, &seq);
    snprintf(s->stop_sequence, sizeof(s->stop_sequence), "%s", seq ? seq : "");
}

int surf_gwa_stream_event(struct surf_gwa_stream *s, const char *data,
                          size_t len, struct fo_buf *out)
{
    if (s->finished)
        return FO_OK;
    if (len == 6 && !memcmp(data, "[DONE]", 6))
        return surf_gwa_stream_finish(s, out);
    cJSON *j = NULL;
    struct fo_err err;
    if (fo_json_parse(data, len, &j, &err) != FO_OK || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return FO_OK;
    }
    if (!s->started && str(j, "id"))
        msg_id(j, s->id, sizeof(s->id));
    const cJSON *u = get(j, "usage");
    if (cJSON_IsObject(u)) {
        s->tokens_in = usage_num(u, "prompt_tokens");
        s->tokens_out = usage_num(u, "completion_tokens");
    }
    int rc = start(s, out);
    const cJSON *ch = cJSON_GetArrayItem(get(j, "choices"), 0);
    const cJSON *d = get(ch, "delta");
    const char *text = str(d, "content");
    if (rc == FO_OK && text && text[0])
        rc = text_delta(s, out, text);
    const cJSON *tc;
    cJSON_ArrayForEach (tc, get(d, "tool_calls")) {
        if (rc == FO_OK)
            rc = tool_delta(s, out, tc);
    }
    take_stop(s, ch);
    cJSON_Delete(j);
    return rc;
}

int surf_gwa_stream_finish(struct surf_gwa_stream *s, struct fo_buf *out)
{
    if (s->finished)
        return FO_OK;
    int rc = start(s, out);
    if (rc == FO_OK)
        rc = close_block(s, out);
    if (rc)
        return rc;
    s->finished = 1;
    cJSON *o = event("message_delta"), *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "stop_reason",
                            s->stop_reason ? s->stop_reason : "end_turn");
    if (s->stop_sequence[0])
        cJSON_AddStringToObject(d, "stop_sequence", s->stop_sequence);
    else
        cJSON_AddNullToObject(d, "stop_sequence");
    cJSON_AddItemToObject(o, "delta", d);
    add_usage(o, s->tokens_in, s->tokens_out);
    rc = emit(out, "message_delta", o);
    if (rc == FO_OK)
        rc = emit(out, "message_stop", event("message_stop"));
    return rc;
}
