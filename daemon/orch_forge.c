/* orch_forge: the forge layer of the tool loop (orch_forge.h): rescue of
 * tool calls written as text, the respond tool, and what the next entry
 * says about them. */
#include "daemon/orch_forge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void oe_forge_opts(const struct run *r, size_t t, const char *provider,
                   struct orch_forge *out)
{
    const struct orch_exec_config *ex = r->t[t].ex;
    orch_model_forge(ex ? ex->models : NULL, ex ? ex->kind : 0,
                     ex ? ex->tier : ORCH_TIER_ANY, provider, out);
}

int oe_forge_tools(const struct run *r, size_t t, cJSON *tools)
{
    struct orch_forge fo;
    oe_forge_opts(r, t, NULL, &fo);
    if (!fo.respond_tool)
        return 0;
    static const char schema[] =
        "{\"type\":\"object\",\"properties\":{\"answer\":{\"type\":"
        "\"string\",\"description\":\"your final answer\"}},"
        "\"required\":[\"answer\"]}";
    cJSON *o = cJSON_CreateObject(), *sch = NULL;
    int ok = o && fo_json_parse(schema, strlen(schema), &sch, NULL) == FO_OK;
    if (o)
        cJSON_AddItemToArray(tools, o);
    ok = ok && cJSON_AddStringToObject(o, "name", OE_RESPOND_TOOL) &&
         cJSON_AddStringToObject(
             o, "description",
             "Give your final answer and end the task. Call it alone, once "
             "the other calls you need have returned.") &&
         cJSON_AddItemToObject(o, "input_schema", sch);
    if (!ok)
        cJSON_Delete(sch);
    return ok ? 0 : -1;
}

/* The note's object, made on first use. */
static cJSON *note(struct task *s)
{
    if (!s->forge_note)
        s->forge_note = cJSON_CreateObject();
    return s->forge_note;
}

/* s with what the guardrails find replaced (malloc'd): a tool name or a
 * reason quotes text the model wrote. */
static char *scrub(const struct run *r, const char *s)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cJSON *found = NULL;
    long n =
        orch_guard_scan(orch_guardrails(r->e->o), s, strlen(s), &b, &found);
    cJSON_Delete(found);
    char *out = n > 0    ? fo_buf_detach(&b, NULL)
                : n == 0 ? orch_strdup(s)
                         : NULL;
    fo_buf_release(&b);
    return out;
}

/* Each string member of each object of list, scrubbed. 0, or -1. */
static int scrub_list(const struct run *r, cJSON *list)
{
    cJSON *o, *m;
    cJSON_ArrayForEach (o, list)
        cJSON_ArrayForEach (m, o) {
            if (!cJSON_IsString(m))
                continue;
            char *c = scrub(r, m->valuestring);
            if (!c)
                return -1;
            if (strcmp(c, m->valuestring)) {
                cJSON *v = cJSON_CreateString(c);
                if (!v || !cJSON_ReplaceItemViaPointer(o, m, v)) {
                    cJSON_Delete(v);
                    free(c);
                    return -1;
                }
                m = v;
            }
            free(c);
        }
    return 0;
}

/* The tools a call written as text may name: the lane's, and respond. */
static int offered(const struct run *r, size_t t, int respond,
                   const char ***names, size_t *n)
{
    const struct orch_lane *ln =
        orch_roster_find(orch_roster(r->e->o), r->p->tasks[t].agent);
    size_t k = ln ? ln->n_tools : 0;
    *names = calloc(k + 1, sizeof(**names));
    if (!*names)
        return -1;
    for (size_t i = 0; i < k; i++)
        (*names)[i] = ln->tools[i];
    if (respond)
        (*names)[k++] = OE_RESPOND_TOOL;
    *n = k;
    return 0;
}

/* A reply that called no tool: the calls its text holds, made real. */
static int rescue(struct run *r, size_t t, struct orch_model_reply *rep,
                  int respond, char *why, size_t n)
{
    struct task *s = &r->t[t];
    const char **names = NULL;
    size_t nn = 0;
    struct orch_rescue rs;
    struct fo_err err;
    char prefix[48];
    snprintf(prefix, sizeof(prefix), "rescued-%d-", s->turn);
    if (offered(r, t, respond, &names, &nn) < 0)
        return -1;
    int rc = orch_rescue_scan(rep->text, rep->text_len, names, nn, prefix, &rs,
                              &err);
    free(names);
    if (rc)
        return -1;
    int out = OE_FORGE_PASS;
    cJSON *no = NULL;
    if ((rs.refused || rs.malformed) && !(no = note(s)))
        goto nomem;
    if (rs.refused) {
        if (scrub_list(r, rs.refused) < 0)
            goto nomem;
        cJSON_AddItemToObject(no, "rescue_refused", rs.refused);
        rs.refused = NULL;
    }
    if (rs.malformed) {
        if (scrub_list(r, rs.malformed) < 0)
            goto nomem;
        if (!rs.calls) {
            snprintf(why, n, "%s",
                     oe_str_of(cJSON_GetArrayItem(rs.malformed, 0), "error"));
            out = OE_FORGE_MALFORMED;
        }
        cJSON_AddItemToObject(no, "rescue_malformed", rs.malformed);
        rs.malformed = NULL;
    }
    if (rs.calls) {
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        char *calls =
            fo_json_canon(rs.calls, &b, NULL) ? NULL : fo_buf_detach(&b, NULL);
        fo_buf_release(&b);
        if (!calls)
            goto nomem;
        free(rep->tool_calls);
        rep->tool_calls = calls;
        free(rep->text);
        rep->text = rs.text;
        rep->text_len = strlen(rs.text);
        rs.text = NULL;
    }
    orch_rescue_release(&rs);
    return out;
nomem:
    orch_rescue_release(&rs);
    return -1;
}

/* A respond call of the reply with a good answer: taken. */
static int respond_take(struct run *r, size_t t, struct orch_model_reply *rep)
{
    struct task *s = &r->t[t];
    cJSON *calls = NULL;
    if (fo_json_parse(rep->tool_calls, strlen(rep->tool_calls), &calls, NULL) !=
        FO_OK)
        return -1;
    const cJSON *c, *hit = NULL;
    cJSON_ArrayForEach (c, calls) {
        const char *name = oe_str_of(c, "name");
        if (!hit && name && !strcmp(name, OE_RESPOND_TOOL))
            hit = c;
    }
    char why[256];
    char *answer = hit ? orch_rescue_respond_answer(oe_str_of(hit, "arguments"),
                                                    why, sizeof(why))
                       : NULL;
    if (!answer) { /* none, or a malformed one: witnessed and answered */
        cJSON_Delete(calls);
        return OE_FORGE_PASS;
    }
    int others = cJSON_GetArraySize(calls) - 1;
    cJSON *no = note(s);
    int ok =
        no && cJSON_AddStringToObject(no, "answer_via", OE_RESPOND_TOOL) &&
        (!oe_str_of(hit, "rescued") ||
         cJSON_AddStringToObject(no, "rescued", oe_str_of(hit, "rescued"))) &&
        (others == 0 || fo_json_add_int(no, "calls_not_run", others));
    cJSON_Delete(calls);
    if (!ok) {
        free(answer);
        return -1;
    }
    free(rep->tool_calls);
    rep->tool_calls = NULL;
    free(rep->text);
    rep->text = answer;
    rep->text_len = strlen(answer);
    return OE_FORGE_RESPOND;
}

int oe_forge_reply(struct run *r, size_t t, struct orch_model_reply *rep,
                   char *why, size_t n, struct fo_err *err)
{
    struct task *s = &r->t[t];
    struct orch_forge asked, answered;
    cJSON_Delete(s->forge_note);
    s->forge_note = NULL;
    oe_forge_opts(r, t, NULL, &asked);
    oe_forge_opts(r, t, rep->provider[0] ? rep->provider : NULL, &answered);
    int out = OE_FORGE_PASS;
    if (!rep->tool_calls && rep->text && answered.rescue)
        out = rescue(r, t, rep, asked.respond_tool, why, n);
    if (out == OE_FORGE_PASS && rep->tool_calls && asked.respond_tool)
        out = respond_take(r, t, rep);
    if (out < 0)
        return -oe_nomem(err);
    return out;
}

int oe_forge_system(const struct run *r, size_t t, struct fo_buf *sys)
{
    struct orch_forge fo;
    oe_forge_opts(r, t, NULL, &fo);
    return fo.respond_tool ? fo_buf_puts(sys, " To give your final answer, "
                                              "call the respond tool with it.")
                           : FO_OK;
}

int oe_forge_respond_call(const struct run *r, size_t t, const cJSON *call,
                          char *why, size_t n)
{
    struct orch_forge fo;
    const char *tool = oe_str_of(call, "tool");
    oe_forge_opts(r, t, NULL, &fo);
    if (!fo.respond_tool || !tool || strcmp(tool, OE_RESPOND_TOOL))
        return 0;
    char *a = orch_rescue_respond_answer(oe_str_of(call, "arguments"), why, n);
    if (a) /* good, yet witnessed: it came with other calls, on resume */
        snprintf(why, n,
                 "respond: call it alone, once your other calls "
                 "have returned");
    free(a);
    return 1;
}

int oe_forge_bad_calls_spent(const struct run *r, size_t t, char *why, size_t n)
{
    struct orch_forge fo;
    oe_forge_opts(r, t, NULL, &fo);
    if (r->t[t].bad_calls <= fo.malformed_retries)
        return 0;
    snprintf(why, n,
             "%d malformed or unknown tool calls in a row, each answered "
             "with the reason (malformed_retries: %d)",
             r->t[t].bad_calls, fo.malformed_retries);
    return 1;
}

int oe_forge_fix_text(const cJSON *entry, struct fo_buf *b)
{
    return fo_buf_printf(b,
                         "[forum: your tool call could not be read: %s. Call "
                         "the tool again with a JSON object of arguments, or "
                         "answer in plain text.]",
                         oe_str_of(entry, "error"));
}

int oe_forge_note_merge(struct task *s, cJSON *o)
{
    cJSON *no = s->forge_note, *m;
    int ok = 1;
    s->forge_note = NULL;
    while (no && (m = no->child)) {
        cJSON_DetachItemViaPointer(no, m);
        cJSON_DeleteItemFromObjectCaseSensitive(o, m->string);
        if (!cJSON_AddItemToObject(o, m->string, m)) {
            cJSON_Delete(m);
            ok = 0;
        }
    }
    cJSON_Delete(no);
    return ok;
}
