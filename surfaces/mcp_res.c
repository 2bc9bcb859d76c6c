/* mcp_res: the ledger as MCP resources and a few prompts, so an editor can
 * attach an entry, a run or the latest checkpoint to a conversation, or
 * start one from "audit this run". Everything is read through the handler
 * table (surf_call), as the tools are. */
#include "surfaces/mcp_res.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/fo_json.h"
#include "surfaces/surf.h"

#define URI_ENTRY "forum://entry/"
#define URI_RUN "forum://run/"
#define URI_CHECKPOINT "forum://checkpoint/latest"
#define URI_STATUS "forum://status"

static cJSON *call(struct surf_ctx *ctx, const char *method, cJSON *in,
                   struct fo_err *err)
{
    cJSON *out = NULL;
    const struct surf_method *m = surf_find(method);
    int rc = m ? surf_call(ctx, m, in, &out, err)
               : fo_err_set(err, FO_E_INTERNAL, "no method %s", method);
    cJSON_Delete(in);
    return rc ? NULL : out;
}

static cJSON *seq_in(const char *key, long long v)
{
    cJSON *in = cJSON_CreateObject();
    if (in && !fo_json_add_int(in, key, v)) {
        cJSON_Delete(in);
        return NULL;
    }
    return in;
}

static cJSON *resource(const char *uri, const char *name, const char *title,
                       const char *desc, const char *mime)
{
    cJSON *r = cJSON_CreateObject();
    if (!r)
        return NULL;
    cJSON_AddStringToObject(
        r, uri[strlen(uri) - 1] == '}' ? "uriTemplate" : "uri", uri);
    cJSON_AddStringToObject(r, "name", name);
    cJSON_AddStringToObject(r, "title", title);
    cJSON_AddStringToObject(r, "description", desc);
    cJSON_AddStringToObject(r, "mimeType", mime);
    return r;
}

cJSON *mcp_resources_list(void)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *a = o ? cJSON_AddArrayToObject(o, "resources") : NULL;
    if (!a) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToArray(
        a, resource(URI_CHECKPOINT, "checkpoint", "Latest signed checkpoint",
                    "The ledger's latest signed checkpoint (C2SP signed "
                    "note): size, root, signatures.",
                    "text/plain"));
    cJSON_AddItemToArray(a, resource(URI_STATUS, "status", "Ledger status",
                                     "Entry count, tree root and size, "
                                     "signed size.",
                                     "application/json"));
    return o;
}

cJSON *mcp_resource_templates(void)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *a = o ? cJSON_AddArrayToObject(o, "resourceTemplates") : NULL;
    if (!a) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToArray(
        a, resource(URI_ENTRY "{seq}", "entry", "A ledger entry",
                    "{entry, body}: one entry (its 8 hashed fields and "
                    "hash) and its JSON body (null when redacted).",
                    "application/json"));
    cJSON_AddItemToArray(
        a, resource(URI_RUN "{id}", "run", "A run",
                    "A run's state, its entries so far and its answer (id: "
                    "the seq of its request).",
                    "application/json"));
    return o;
}

/* A decimal seq after prefix, exactly; -1 when not one. */
static long long seq_after(const char *uri, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(uri, prefix, n) != 0)
        return -1;
    const char *p = uri + n;
    if (!*p || (p[0] == '0' && p[1]) || strlen(p) > 15)
        return -1;
    long long v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static cJSON *contents(const char *uri, const char *mime, cJSON *obj,
                       const char *text)
{
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (obj && fo_json_canon(obj, &b, &err)) {
        fo_buf_release(&b);
        return NULL;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON *a = o ? cJSON_AddArrayToObject(o, "contents") : NULL;
    cJSON *c = cJSON_CreateObject();
    if (!a || !c || !cJSON_AddItemToArray(a, c)) {
        cJSON_Delete(c);
        cJSON_Delete(o);
        fo_buf_release(&b);
        return NULL;
    }
    cJSON_AddStringToObject(c, "uri", uri);
    cJSON_AddStringToObject(c, "mimeType", mime);
    cJSON_AddStringToObject(c, "text", obj ? (b.data ? b.data : "") : text);
    fo_buf_release(&b);
    return o;
}

int mcp_resource_read(struct surf_ctx *ctx, const char *uri, cJSON **out,
                      struct fo_err *err)
{
    *out = NULL;
    long long seq;
    cJSON *v = NULL;
    if (!strcmp(uri, URI_CHECKPOINT)) {
        v = call(ctx, "ledger_checkpoint", NULL, err);
        const cJSON *note = cJSON_GetObjectItemCaseSensitive(v, "note");
        if (v && cJSON_IsString(note))
            *out = contents(uri, "text/plain", NULL, note->valuestring);
    } else if (!strcmp(uri, URI_STATUS)) {
        v = call(ctx, "status", NULL, err);
        if (v)
            *out = contents(uri, "application/json", v, NULL);
    } else if ((seq = seq_after(uri, URI_ENTRY)) >= 0) {
        cJSON *e = call(ctx, "ledger_get", seq_in("seq", seq), err);
        if (e && (v = cJSON_CreateObject())) {
            struct fo_err berr;
            cJSON *b = call(ctx, "ledger_body", seq_in("seq", seq), &berr);
            cJSON *body = cJSON_DetachItemFromObjectCaseSensitive(b, "body");
            cJSON_AddItemToObject(v, "entry", e);
            e = NULL;
            /* null: the body was redacted */
            cJSON_AddItemToObject(v, "body", body ? body : cJSON_CreateNull());
            cJSON_Delete(b);
            *out = contents(uri, "application/json", v, NULL);
        }
        cJSON_Delete(e);
    } else if ((seq = seq_after(uri, URI_RUN)) >= 0) {
        v = call(ctx, "run_get", seq_in("run", seq), err);
        if (v)
            *out = contents(uri, "application/json", v, NULL);
    } else {
        return fo_err_set(err, FO_E_NOT_FOUND,
                          "no such resource: %.200s (forum://entry/{seq}, "
                          "forum://run/{id}, " URI_CHECKPOINT ", " URI_STATUS
                          ")",
                          uri);
    }
    cJSON_Delete(v);
    if (!*out)
        return err->code ? err->code : fo_err_set(err, FO_E_NOMEM, NULL);
    return FO_OK;
}

cJSON *mcp_prompts_list(void)
{
    const char *list =
        "{\"prompts\":["
        "{\"name\":\"audit_run\",\"title\":\"Audit a run\",\"description\":"
        "\"Check a forum run step by step: each task's result against its "
        "verdict, the budget, gates and the answer's coverage.\","
        "\"arguments\":[{\"name\":\"run\",\"description\":\"The run's id "
        "(the seq of its request)\",\"required\":true}]},"
        "{\"name\":\"explain_verify_failure\",\"title\":\"Explain a verify "
        "result\",\"description\":\"Verify the ledger (deep) and explain "
        "what broke, where, and what to do.\",\"arguments\":[]}]}";
    cJSON *o = NULL;
    struct fo_err err;
    fo_json_parse(list, strlen(list), &o, &err);
    return o;
}

static cJSON *user_text(const char *text)
{
    cJSON *m = cJSON_CreateObject();
    cJSON *c = m ? cJSON_AddObjectToObject(m, "content") : NULL;
    if (!c) {
        cJSON_Delete(m);
        return NULL;
    }
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(c, "type", "text");
    cJSON_AddStringToObject(c, "text", text);
    return m;
}

/* A user message carrying a resource's contents (embedded). */
static cJSON *user_resource(cJSON *contents_obj)
{
    cJSON *first = cJSON_DetachItemFromArray(
        cJSON_GetObjectItemCaseSensitive(contents_obj, "contents"), 0);
    cJSON *m = cJSON_CreateObject();
    cJSON *c = m ? cJSON_AddObjectToObject(m, "content") : NULL;
    if (!first || !c) {
        cJSON_Delete(first);
        cJSON_Delete(m);
        return NULL;
    }
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(c, "type", "resource");
    cJSON_AddItemToObject(c, "resource", first);
    return m;
}

int mcp_prompt_get(struct surf_ctx *ctx, const char *name, const cJSON *args,
                   cJSON **out, struct fo_err *err)
{
    *out = NULL;
    cJSON *r = cJSON_CreateObject();
    cJSON *msgs = r ? cJSON_AddArrayToObject(r, "messages") : NULL;
    if (!msgs) {
        cJSON_Delete(r);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    char text[1024];
    if (!strcmp(name, "audit_run")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(args, "run");
        long long run = -1;
        if (cJSON_IsString(a))
            run = seq_after(a->valuestring, "");
        if (run < 0) {
            cJSON_Delete(r);
            return fo_err_set(err, FO_E_INVALID,
                              "audit_run: argument run: a run id (a seq)");
        }
        char uri[64];
        snprintf(uri, sizeof(uri), URI_RUN "%lld", run);
        cJSON *res = NULL;
        int rc = mcp_resource_read(ctx, uri, &res, err);
        if (rc) {
            cJSON_Delete(r);
            return rc;
        }
        snprintf(text, sizeof(text),
                 "Audit forum run %lld, whose record is attached (%s). For "
                 "each task: did its result do what its instruction asked, "
                 "and does its verdict agree (a verdict `unjudged` had no "
                 "criteria or no model)? Note escalations, refusals, gates "
                 "and who decided them, a spent budget, and whether the "
                 "answer covers the request. Name entries by seq; read any "
                 "entry in full at forum://entry/{seq}, and check an entry's "
                 "inclusion with the ledger_prove tool.",
                 run, uri);
        cJSON_AddItemToArray(msgs, user_text(text));
        cJSON_AddItemToArray(msgs, user_resource(res));
        cJSON_Delete(res);
        cJSON_AddStringToObject(r, "description", "Audit a forum run");
    } else if (!strcmp(name, "explain_verify_failure")) {
        cJSON *in = cJSON_CreateObject();
        cJSON_AddTrueToObject(in, "deep");
        cJSON *v = call(ctx, "ledger_verify", in, err);
        if (!v) {
            cJSON_Delete(r);
            return err->code;
        }
        cJSON *res = contents("forum://verify", "application/json", v, NULL);
        cJSON_Delete(v);
        snprintf(text, sizeof(text),
                 "The result of verifying this forum ledger (chain, Merkle "
                 "tree and every body) is attached. If it failed, explain in "
                 "plain words what broke (the reason names the check: "
                 "seq_gap, prev_mismatch, hash_mismatch, bad_parent, "
                 "ts_backwards, bad_field, tree_mismatch, or a bad body), at "
                 "which entry, what could have caused it, and what to do "
                 "(restore a verified backup with `forum ledger restore`, "
                 "compare with a signed checkpoint). If it passed, say what "
                 "that proves and what it does not.");
        cJSON_AddItemToArray(msgs, user_text(text));
        cJSON_AddItemToArray(msgs, user_resource(res));
        cJSON_Delete(res);
        cJSON_AddStringToObject(r, "description",
                                "Explain a ledger verify result");
    } else {
        cJSON_Delete(r);
        return fo_err_set(err, FO_E_NOT_FOUND, "no such prompt: %.64s", name);
    }
    *out = r;
    return FO_OK;
}
