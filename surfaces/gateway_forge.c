/* gateway_forge: see gateway_forge.h. */
#include "surfaces/gateway_forge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/rand.h>

#include "daemon/orch_rescue.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "ledger/fo_sha.h"

cJSON *surf_gwf_tools(const cJSON *req)
{
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(req, "tools"), *t;
    cJSON *out = NULL;
    if (!cJSON_IsArray(ts))
        return NULL;
    cJSON_ArrayForEach (t, ts) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const char *name = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(fn ? fn : t, "name"));
        if (!name || !name[0])
            continue;
        if (!out && !(out = cJSON_CreateArray()))
            return NULL;
        cJSON *s = cJSON_CreateString(name);
        if (!s || !cJSON_AddItemToArray(out, s)) {
            cJSON_Delete(s);
            cJSON_Delete(out);
            return NULL;
        }
    }
    return out;
}

/* "<kind>_<16 random hex digits>_": the ids of one answer's calls. */
static void id_prefix(const char *kind, char *out, size_t n)
{
    uint8_t r[8] = {0};
    char hex[17];
    if (RAND_bytes(r, sizeof(r)) != 1) /* unlikely; ids stay unique enough
                                          within the answer */
        memset(r, 0, sizeof(r));
    fo_hex(r, sizeof(r), hex);
    snprintf(out, n, "%s_%s_", kind, hex);
}

/* Scans text for calls to tools (an array of names). FO_OK with rs
 * filled, or FO_E_NOMEM. */
static int scan(const char *text, const cJSON *tools, struct orch_rescue *rs)
{
    size_t n = (size_t)cJSON_GetArraySize(tools), k = 0;
    const char **names = calloc(n ? n : 1, sizeof(*names));
    if (!names)
        return FO_E_NOMEM;
    const cJSON *t;
    cJSON_ArrayForEach (t, tools)
        names[k++] = t->valuestring;
    struct fo_err err;
    int rc = orch_rescue_scan(text, strlen(text), names, k, "c", rs, &err);
    free(names);
    return rc;
}

/* j as canonical JSON into *out; 1, or -1 out of memory. */
static int emit(const cJSON *j, char **out, size_t *out_len)
{
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    *out =
        fo_json_canon(j, &b, &err) == FO_OK ? fo_buf_detach(&b, out_len) : NULL;
    fo_buf_release(&b);
    return *out ? 1 : -1;
}

/* Adds each call's form to forms. 0, or -1. */
static int add_forms(cJSON *forms, const cJSON *calls)
{
    const cJSON *c;
    cJSON_ArrayForEach (c, calls) {
        const char *f = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(c, "rescued"));
        cJSON *s = cJSON_CreateString(f ? f : "?");
        if (!s || !cJSON_AddItemToArray(forms, s)) {
            cJSON_Delete(s);
            return -1;
        }
    }
    return 0;
}

/* o[k] = v, replacing what was there; v is o's, or freed. 0, or -1. */
static int set_item(cJSON *o, const char *k, cJSON *v)
{
    int ok = v && (cJSON_GetObjectItemCaseSensitive(o, k)
                       ? cJSON_ReplaceItemInObjectCaseSensitive(o, k, v)
                       : cJSON_AddItemToObject(o, k, v));
    if (!ok)
        cJSON_Delete(v);
    return ok ? 0 : -1;
}

/* One chat choice's message rewritten; 1 rescued, 0 not, -1 nomem. */
static int chat_choice(cJSON *ch, const cJSON *tools, const char *prefix,
                       int *next, cJSON *forms)
{
    cJSON *m = cJSON_GetObjectItemCaseSensitive(ch, "message");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    const char *text =
        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "content"));
    if (!cJSON_IsObject(m) || !text || cJSON_GetArraySize(tc) > 0)
        return 0;
    struct orch_rescue rs;
    if (scan(text, tools, &rs) != FO_OK)
        return -1;
    if (!rs.calls) {
        orch_rescue_release(&rs);
        return 0;
    }
    cJSON *calls = cJSON_CreateArray();
    int ok = calls && add_forms(forms, rs.calls) == 0;
    const cJSON *c, *rcalls = ok ? rs.calls : NULL;
    cJSON_ArrayForEach (c, rcalls) {
        char id[64];
        snprintf(id, sizeof(id), "%s%d", prefix, ++*next);
        cJSON *o = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        ok = o && fn && cJSON_AddItemToArray(calls, o) &&
             cJSON_AddStringToObject(o, "id", id) &&
             cJSON_AddStringToObject(o, "type", "function") &&
             cJSON_AddItemToObject(o, "function", fn);
        if (!ok) {
            cJSON_Delete(fn);
            break;
        }
        ok = cJSON_AddStringToObject(
                 fn, "name",
                 cJSON_GetStringValue(
                     cJSON_GetObjectItemCaseSensitive(c, "name"))) &&
             cJSON_AddStringToObject(
                 fn, "arguments",
                 cJSON_GetStringValue(
                     cJSON_GetObjectItemCaseSensitive(c, "arguments")));
        if (!ok)
            break;
    }
    if (!ok)
        cJSON_Delete(calls);
    ok = ok && set_item(m, "tool_calls", calls) == 0;
    ok = ok &&
         set_item(m, "content",
                  rs.text[0] ? cJSON_CreateString(rs.text)
                             : cJSON_CreateNull()) == 0 &&
         set_item(ch, "finish_reason", cJSON_CreateString("tool_calls")) == 0;
    orch_rescue_release(&rs);
    return ok ? 1 : -1;
}

int surf_gwf_chat(const char *body, size_t len, const cJSON *tools, char **out,
                  size_t *out_len, cJSON **forms)
{
    *out = NULL;
    *forms = NULL;
    cJSON *j = NULL, *ch;
    struct fo_err err;
    if (!tools || fo_json_parse(body ? body : "", len, &j, &err) != FO_OK)
        return 0;
    char prefix[48];
    id_prefix("call", prefix, sizeof(prefix));
    int next = 0, rc = 0;
    cJSON *chs = cJSON_GetObjectItemCaseSensitive(j, "choices");
    if (!(*forms = cJSON_CreateArray()))
        rc = -1, chs = NULL;
    cJSON_ArrayForEach (ch, chs) {
        int r = chat_choice(ch, tools, prefix, &next, *forms);
        if (r)
            rc = r;
        if (r < 0)
            break;
    }
    if (rc == 1)
        rc = emit(j, out, out_len);
    cJSON_Delete(j);
    if (rc != 1) {
        cJSON_Delete(*forms);
        *forms = NULL;
    }
    return rc;
}

/* The blocks one text block becomes, appended to to. 1 rescued (the
 * block is replaced), 0 not, -1 nomem. */
static int text_block(const cJSON *b, const cJSON *tools, const char *prefix,
                      int *next, cJSON *to, cJSON *forms)
{
    const char *text =
        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "text"));
    const char *type =
        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "type"));
    if (!text || !type || strcmp(type, "text"))
        return 0;
    struct orch_rescue rs;
    if (scan(text, tools, &rs) != FO_OK)
        return -1;
    if (!rs.calls) {
        orch_rescue_release(&rs);
        return 0;
    }
    int ok = add_forms(forms, rs.calls) == 0;
    if (ok && rs.text[0]) {
        cJSON *t = cJSON_CreateObject();
        ok = t && cJSON_AddItemToArray(to, t) &&
             cJSON_AddStringToObject(t, "type", "text") &&
             cJSON_AddStringToObject(t, "text", rs.text);
    }
    const cJSON *c, *rcalls = ok ? rs.calls : NULL;
    cJSON_ArrayForEach (c, rcalls) {
        char id[64];
        snprintf(id, sizeof(id), "%s%d", prefix, ++*next);
        const char *args = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(c, "arguments"));
        cJSON *in = NULL, *o = cJSON_CreateObject();
        struct fo_err err;
        if (!args || fo_json_parse(args, strlen(args), &in, &err) != FO_OK)
            in = cJSON_CreateObject();
        ok = o && in && cJSON_AddItemToArray(to, o) &&
             cJSON_AddStringToObject(o, "type", "tool_use") &&
             cJSON_AddStringToObject(o, "id", id) &&
             cJSON_AddStringToObject(
                 o, "name",
                 cJSON_GetStringValue(
                     cJSON_GetObjectItemCaseSensitive(c, "name"))) &&
             cJSON_AddItemToObject(o, "input", in);
        if (!ok) {
            cJSON_Delete(in);
            break;
        }
    }
    orch_rescue_release(&rs);
    return ok ? 1 : -1;
}

int surf_gwf_messages(const char *body, size_t len, const cJSON *tools,
                      char **out, size_t *out_len, cJSON **forms)
{
    *out = NULL;
    *forms = NULL;
    cJSON *j = NULL;
    struct fo_err err;
    if (!tools || fo_json_parse(body ? body : "", len, &j, &err) != FO_OK)
        return 0;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(j, "content"), *b;
    cJSON_ArrayForEach (b, content) {
        const char *type =
            cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "type"));
        if (type && !strcmp(type, "tool_use")) {
            cJSON_Delete(j); /* it called a tool: left as it is */
            return 0;
        }
    }
    char prefix[48];
    id_prefix("toolu", prefix, sizeof(prefix));
    int next = 0, rc = 0;
    cJSON *to = cJSON_CreateArray();
    *forms = cJSON_CreateArray();
    if (!to || !*forms)
        rc = -1;
    const cJSON *blocks = rc || !cJSON_IsArray(content) ? NULL : content;
    cJSON_ArrayForEach (b, blocks) {
        int r = text_block(b, tools, prefix, &next, to, *forms);
        cJSON *d = r ? NULL : cJSON_Duplicate(b, 1);
        if (!r && (!d || !cJSON_AddItemToArray(to, d))) {
            cJSON_Delete(d);
            r = -1;
        }
        if (r)
            rc = r;
        if (r < 0)
            break;
    }
    if (rc == 1) {
        rc = set_item(j, "content", to) == 0 ? 1 : -1;
        to = NULL; /* j's, or freed */
        if (rc == 1 &&
            (set_item(j, "stop_reason", cJSON_CreateString("tool_use")) ||
             set_item(j, "stop_sequence", cJSON_CreateNull())))
            rc = -1;
    }
    if (rc == 1)
        rc = emit(j, out, out_len);
    cJSON_Delete(to);
    cJSON_Delete(j);
    if (rc != 1) {
        cJSON_Delete(*forms);
        *forms = NULL;
    }
    return rc;
}
