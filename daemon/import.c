/* import: OTLP/JSON spans, LangSmith runs and generic JSONL events made
 * ledger entries in one batch (daemon/import.h, docs/IMPORT.md). Each
 * format is read into records {id, parent id, kind, actor, body}; the
 * records are then checked and ordered alike. */
#include "daemon/import.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "ledger/fo_sha.h"

#define NONE SIZE_MAX
#define POS_MAX 96
#define EXACT_INT_MAX 9007199254740991LL /* 2^53 - 1 */

struct rec {
    char *id;
    char *parent_id; /* NULL: a root */
    char pos[POS_MAX];
    const char *kind;
    char actor[LEDGER_ACTOR_MAX + 1];
    cJSON *body;
    size_t parent; /* the parent record, NONE: the import entry */
    int dangling;  /* a parent id not in the file */
    int state;     /* ordering: 0 new, 1 on the walk, 2 placed */
    size_t at;     /* place in the append order */
};

struct imp {
    struct rec *v;
    size_t n, cap;
    const char *format;
    struct fo_err *err;
};

static const char *const formats[] = {"otel", "langsmith", "jsonl"};

int import_format_known(const char *format)
{
    for (size_t i = 0; format && i < 3; i++)
        if (!strcmp(format, formats[i]))
            return 1;
    return 0;
}

static int nomem(struct fo_err *err)
{
    return fo_err_set(err, FO_E_NOMEM, NULL);
}

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = get(o, k);
    return cJSON_IsString(v) && v->valuestring[0] ? v->valuestring : NULL;
}

/* An id: a non-empty string, or an integral number, as text (malloc'd);
 * NULL when v is neither. */
static char *id_text(const cJSON *v)
{
    if (cJSON_IsString(v) && v->valuestring[0])
        return strdup(v->valuestring);
    /* in range before the conversion: a double beyond long long's range
     * does not convert */
    if (cJSON_IsNumber(v) && v->valuedouble >= -(double)EXACT_INT_MAX &&
        v->valuedouble <= (double)EXACT_INT_MAX &&
        v->valuedouble == (double)(long long)v->valuedouble) {
        char b[32];
        snprintf(b, sizeof(b), "%lld", (long long)v->valuedouble);
        return strdup(b);
    }
    return NULL;
}

/* v, or NULL when it is null or "" (no parent). */
static const cJSON *no_id(const cJSON *v)
{
    return cJSON_IsNull(v) || (cJSON_IsString(v) && !v->valuestring[0]) ? NULL
                                                                        : v;
}

/* Sets o[k] to v (consumed), replacing a member of that name. NULL v is
 * out of memory. */
static int put(cJSON *o, const char *k, cJSON *v)
{
    if (!v)
        return 0;
    if (cJSON_GetObjectItemCaseSensitive(o, k))
        return cJSON_ReplaceItemInObjectCaseSensitive(o, k, v);
    return cJSON_AddItemToObject(o, k, v);
}

/* o[k] = a copy of v, when v is not NULL. */
static int put_copy(cJSON *o, const char *k, const cJSON *v)
{
    return !v || put(o, k, cJSON_Duplicate(v, 1));
}

/* At most LEDGER_ACTOR_MAX bytes of s, cut on a character boundary (s is
 * valid UTF-8, as the parser made it); dflt when s is NULL or empty. */
static void actor_of(char out[LEDGER_ACTOR_MAX + 1], const char *s,
                     const char *dflt)
{
    if (!s || !*s)
        s = dflt;
    size_t n = strlen(s);
    if (n > LEDGER_ACTOR_MAX) {
        n = LEDGER_ACTOR_MAX;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(out, s, n);
    out[n] = '\0';
}

/* A new record (body consumed, also on failure). */
static int add_rec(struct imp *m, char *id, char *parent_id, const char *pos,
                   const char *kind, const char *actor, cJSON *body)
{
    if (m->n == IMPORT_MAX_RECORDS) {
        free(id);
        free(parent_id);
        cJSON_Delete(body);
        return fo_err_set(m->err, FO_E_TOO_LARGE,
                          "%s: more than %d records in one import (split "
                          "the file)",
                          pos, IMPORT_MAX_RECORDS);
    }
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        struct rec *v = realloc(m->v, cap * sizeof(*v));
        if (!v) {
            free(id);
            free(parent_id);
            cJSON_Delete(body);
            return nomem(m->err);
        }
        m->v = v;
        m->cap = cap;
    }
    struct rec *r = &m->v[m->n++];
    memset(r, 0, sizeof(*r));
    r->id = id;
    r->parent_id = parent_id;
    r->kind = kind;
    r->body = body;
    r->parent = NONE;
    snprintf(r->pos, sizeof(r->pos), "%s", pos);
    actor_of(r->actor, actor, m->format);
    return FO_OK;
}

/* The fields every record's body has (docs/IMPORT.md): source, id,
 * parent_id, name, start, end. */
static cJSON *body_new(const char *source, const char *id,
                       const char *parent_id, const char *name,
                       const cJSON *start, const cJSON *end)
{
    cJSON *b = cJSON_CreateObject();
    if (!b || !cJSON_AddStringToObject(b, "source", source) ||
        !cJSON_AddStringToObject(b, "id", id) ||
        (parent_id && !cJSON_AddStringToObject(b, "parent_id", parent_id)) ||
        (name && !cJSON_AddStringToObject(b, "name", name)) ||
        !put_copy(b, "start", start) || !put_copy(b, "end", end)) {
        cJSON_Delete(b);
        return NULL;
    }
    return b;
}

/* The lifted model-call fields: model, system, tokens {input, output},
 * prompt, completion (each only when found). */
struct lifted {
    const char *model, *system;
    const cJSON *in_tokens, *out_tokens;
    const cJSON *prompt, *completion;
    cJSON *prompt_own; /* a prompt made here (messages from events) */
};

static int lift_into(cJSON *b, struct lifted *f)
{
    int ok = (!f->model || cJSON_AddStringToObject(b, "model", f->model)) &&
             (!f->system || cJSON_AddStringToObject(b, "system", f->system));
    if (ok && (f->in_tokens || f->out_tokens)) {
        cJSON *t = cJSON_AddObjectToObject(b, "tokens");
        ok = t && put_copy(t, "input", f->in_tokens) &&
             put_copy(t, "output", f->out_tokens);
    }
    if (ok && f->prompt_own) {
        ok = cJSON_AddItemToObject(b, "prompt", f->prompt_own);
        f->prompt_own = NULL;
    } else if (ok) {
        ok = put_copy(b, "prompt", f->prompt);
    }
    ok = ok && put_copy(b, "completion", f->completion);
    cJSON_Delete(f->prompt_own);
    f->prompt_own = NULL;
    return ok;
}

/* ---- OTLP/JSON -------------------------------------------------------- */

static cJSON *otlp_attrs(const cJSON *list);

/* An OTLP AnyValue as plain JSON. */
static cJSON *otlp_value(const cJSON *v)
{
    const cJSON *x;
    if ((x = get(v, "stringValue")) && cJSON_IsString(x))
        return cJSON_CreateString(x->valuestring);
    if ((x = get(v, "boolValue")) && cJSON_IsBool(x))
        return cJSON_CreateBool(cJSON_IsTrue(x));
    if ((x = get(v, "intValue")) && cJSON_IsNumber(x))
        return cJSON_CreateNumber(x->valuedouble);
    if (x && cJSON_IsString(x)) { /* int64 as a decimal string */
        char *end;
        errno = 0;
        long long n = strtoll(x->valuestring, &end, 10);
        if (!errno && *x->valuestring && !*end && n <= EXACT_INT_MAX &&
            n >= -EXACT_INT_MAX)
            return cJSON_CreateNumber((double)n);
        return cJSON_CreateString(x->valuestring);
    }
    if ((x = get(v, "doubleValue")) && cJSON_IsNumber(x))
        return cJSON_CreateNumber(x->valuedouble);
    if (x && cJSON_IsString(x)) /* "NaN", "Infinity" */
        return cJSON_CreateString(x->valuestring);
    if ((x = get(v, "bytesValue")) && cJSON_IsString(x))
        return cJSON_CreateString(x->valuestring);
    if ((x = get(v, "arrayValue"))) {
        cJSON *a = cJSON_CreateArray();
        const cJSON *e;
        cJSON_ArrayForEach (e, get(x, "values")) {
            cJSON *y = otlp_value(e);
            if (!a || !y || !cJSON_AddItemToArray(a, y)) {
                cJSON_Delete(y);
                cJSON_Delete(a);
                return NULL;
            }
        }
        return a;
    }
    if ((x = get(v, "kvlistValue")))
        return otlp_attrs(get(x, "values"));
    return cJSON_CreateNull();
}

struct attr_ref {
    const char *key;
    const cJSON *kv;
    size_t i;
};

static int by_key_then_index(const void *a, const void *b)
{
    const struct attr_ref *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : x->i < y->i ? -1 : x->i > y->i;
}

static int by_index(const void *a, const void *b)
{
    const struct attr_ref *x = a, *y = b;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* [{key, value: AnyValue}] as an object (a later key replaces an earlier
 * one); entries without a string key are skipped. Sorted once, so a span
 * with a million attributes takes n log n, not n^2 lookups. */
static cJSON *otlp_attrs(const cJSON *list)
{
    cJSON *o = cJSON_CreateObject();
    size_t n = cJSON_IsArray(list) ? (size_t)cJSON_GetArraySize(list) : 0;
    struct attr_ref *v = n ? malloc(n * sizeof(*v)) : NULL;
    if (!o || (n && !v)) {
        cJSON_Delete(o);
        free(v);
        return NULL;
    }
    size_t k = 0;
    const cJSON *kv;
    cJSON_ArrayForEach (kv, (n ? list : NULL)) {
        const char *key = str(kv, "key");
        if (key)
            v[k] = (struct attr_ref){key, kv, k}, k++;
    }
    if (k > 1)
        qsort(v, k, sizeof(*v), by_key_then_index);
    size_t kept = 0; /* the last of each key */
    for (size_t i = 0; i < k; i++)
        if (i + 1 == k || strcmp(v[i].key, v[i + 1].key))
            v[kept++] = v[i];
    if (kept > 1)
        qsort(v, kept, sizeof(*v), by_index);
    for (size_t i = 0; i < kept; i++) {
        cJSON *x = otlp_value(get(v[i].kv, "value"));
        if (!x || !cJSON_AddItemToObject(o, v[i].key, x)) {
            cJSON_Delete(x);
            cJSON_Delete(o);
            o = NULL;
            break;
        }
    }
    free(v);
    return o;
}

static const char *attr_str(const cJSON *attrs, const char *k)
{
    return str(attrs, k);
}

static const cJSON *attr_any(const cJSON *attrs, const char *a, const char *b)
{
    const cJSON *v = get(attrs, a);
    return v ? v : b ? get(attrs, b) : NULL;
}

/* The GenAI conventions of a span: attributes first, then its events. */
static int otlp_lift(const cJSON *attrs, const cJSON *events, struct lifted *f)
{
    f->model = attr_str(attrs, "gen_ai.response.model");
    if (!f->model)
        f->model = attr_str(attrs, "gen_ai.request.model");
    f->system = attr_str(attrs, "gen_ai.system");
    if (!f->system)
        f->system = attr_str(attrs, "gen_ai.provider.name");
    f->in_tokens = attr_any(attrs, "gen_ai.usage.input_tokens",
                            "gen_ai.usage.prompt_tokens");
    f->out_tokens = attr_any(attrs, "gen_ai.usage.output_tokens",
                             "gen_ai.usage.completion_tokens");
    f->prompt = attr_any(attrs, "gen_ai.prompt", "gen_ai.input.messages");
    f->completion =
        attr_any(attrs, "gen_ai.completion", "gen_ai.output.messages");
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    const cJSON *ev;
    cJSON_ArrayForEach (ev, events) {
        const char *name = str(ev, "name");
        const cJSON *ea = get(ev, "attributes");
        if (!name || strncmp(name, "gen_ai.", 7))
            continue;
        if (!strcmp(name, "gen_ai.content.prompt") && !f->prompt)
            f->prompt = get(ea, "gen_ai.prompt");
        else if (!strcmp(name, "gen_ai.content.completion") && !f->completion)
            f->completion = get(ea, "gen_ai.completion");
        else if (!strcmp(name, "gen_ai.choice") && !f->completion)
            f->completion = attr_any(ea, "message", "content");
        for (size_t i = 0; i < 4 && !f->prompt; i++) {
            char want[48];
            snprintf(want, sizeof(want), "gen_ai.%s.message", roles[i]);
            if (strcmp(name, want))
                continue;
            if (!f->prompt_own && !(f->prompt_own = cJSON_CreateArray()))
                return 0;
            cJSON *msg = cJSON_CreateObject();
            if (!msg || !cJSON_AddItemToArray(f->prompt_own, msg) ||
                !cJSON_AddStringToObject(msg, "role", roles[i]) ||
                !put_copy(msg, "content", attr_any(ea, "content", NULL)))
                return 0;
        }
    }
    return 1;
}

static const char *otlp_kind(const cJSON *attrs, const struct lifted *f)
{
    const char *op = attr_str(attrs, "gen_ai.operation.name");
    if ((op && !strcmp(op, "execute_tool")) ||
        attr_str(attrs, "gen_ai.tool.name"))
        return "tool_call";
    if (f->model || f->system ||
        (op && (!strcmp(op, "chat") || !strcmp(op, "text_completion") ||
                !strcmp(op, "generate_content") || !strcmp(op, "embeddings"))))
        return "llm_call";
    return "span";
}

/* One span of a scope of a resource. */
static int otlp_span(struct imp *m, const cJSON *sp, const char *pos,
                     const cJSON *resource, const char *service,
                     const cJSON *scope)
{
    if (!cJSON_IsObject(sp))
        return fo_err_set(m->err, FO_E_INVALID, "%s: not a span object", pos);
    char *id = NULL;
    if (!str(sp, "spanId") || !(id = strdup(str(sp, "spanId"))))
        return id ? nomem(m->err)
                  : fo_err_set(m->err, FO_E_INVALID,
                               "%s: no spanId (a hex string)", pos);
    const char *pid = str(sp, "parentSpanId");
    char *parent_id = pid ? strdup(pid) : NULL;
    cJSON *attrs = otlp_attrs(get(sp, "attributes"));
    cJSON *events = cJSON_CreateArray();
    struct lifted f = {0};
    const cJSON *ev;
    cJSON_ArrayForEach (ev, (events ? get(sp, "events") : NULL)) {
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(events, e) ||
            (str(ev, "name") &&
             !cJSON_AddStringToObject(e, "name", str(ev, "name"))) ||
            !put_copy(e, "time", get(ev, "timeUnixNano")) ||
            !put(e, "attributes", otlp_attrs(get(ev, "attributes")))) {
            cJSON_Delete(events);
            events = NULL;
            break;
        }
    }
    cJSON *b = NULL;
    int ok = attrs && events && (!pid || parent_id) &&
             otlp_lift(attrs, events, &f) &&
             (b = body_new("otel", id, parent_id, str(sp, "name"),
                           get(sp, "startTimeUnixNano"),
                           get(sp, "endTimeUnixNano"))) &&
             lift_into(b, &f) && put_copy(b, "trace_id", get(sp, "traceId")) &&
             put_copy(b, "span_kind", get(sp, "kind")) &&
             (!service || cJSON_AddStringToObject(b, "service", service)) &&
             put_copy(b, "scope", scope) && put_copy(b, "resource", resource) &&
             cJSON_AddItemToObject(b, "attributes", attrs) &&
             (attrs = NULL, cJSON_AddItemToObject(b, "events", events)) &&
             (events = NULL, put_copy(b, "status", get(sp, "status"))) &&
             put_copy(b, "links", get(sp, "links"));
    const char *kind = ok ? otlp_kind(get(b, "attributes"), &f) : NULL;
    cJSON_Delete(f.prompt_own);
    cJSON_Delete(attrs);
    cJSON_Delete(events);
    if (!ok) {
        cJSON_Delete(b);
        free(id);
        free(parent_id);
        return nomem(m->err);
    }
    /* a span forum exported names its entry's actor */
    const char *actor = str(get(b, "attributes"), "forum.actor");
    if (!actor)
        actor = service ? service : str(scope, "name");
    return add_rec(m, id, parent_id, pos, kind, actor, b);
}

static int read_otel(struct imp *m, const char *data, size_t len)
{
    cJSON *doc = NULL;
    int rc = fo_json_parse(data, len, &doc, m->err);
    if (rc)
        return rc;
    const cJSON *rss = get(doc, "resourceSpans");
    if (!cJSON_IsArray(rss)) {
        rc = fo_err_set(m->err, FO_E_INVALID,
                        "not OTLP/JSON: the top level is %s without a "
                        "\"resourceSpans\" array%s",
                        cJSON_IsArray(doc) ? "an array" : "an object",
                        cJSON_IsArray(doc) ? " (a LangSmith export? use the "
                                             "langsmith format)"
                                           : "");
        cJSON_Delete(doc);
        return rc;
    }
    char pos[POS_MAX];
    size_t i = 0;
    const cJSON *rs;
    cJSON_ArrayForEach (rs, rss) {
        cJSON *resource = otlp_attrs(get(get(rs, "resource"), "attributes"));
        if (!resource) {
            rc = nomem(m->err);
            break;
        }
        const char *service = str(resource, "service.name");
        const cJSON *sss = get(rs, "scopeSpans");
        if (!sss)
            sss = get(rs, "instrumentationLibrarySpans"); /* before 1.0 */
        size_t j = 0;
        const cJSON *ss;
        cJSON_ArrayForEach (ss, (cJSON_IsArray(sss) ? sss : NULL)) {
            const cJSON *scope = get(ss, "scope");
            if (!scope)
                scope = get(ss, "instrumentationLibrary");
            size_t k = 0;
            const cJSON *sp;
            cJSON_ArrayForEach (sp, get(ss, "spans")) {
                snprintf(pos, sizeof(pos),
                         "resourceSpans[%zu].scopeSpans[%zu].spans[%zu]", i, j,
                         k);
                rc = otlp_span(m, sp, pos, resource, service, scope);
                if (rc)
                    break;
                k++;
            }
            if (rc)
                break;
            j++;
        }
        cJSON_Delete(resource);
        if (rc)
            break;
        i++;
    }
    cJSON_Delete(doc);
    return rc;
}

/* ---- LangSmith -------------------------------------------------------- */

static const cJSON *path(const cJSON *v, const char *const *keys, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        v = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, 0) : get(v, keys[i]);
    return v;
}

#define PATH(v, ...)                                                           \
    path((v), (const char *const[]){__VA_ARGS__},                              \
         sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

static const char *path_str(const cJSON *v)
{
    return cJSON_IsString(v) && v->valuestring[0] ? v->valuestring : NULL;
}

static void langsmith_lift(const cJSON *run, int llm, struct lifted *f)
{
    const cJSON *extra = get(run, "extra"), *out = get(run, "outputs");
    f->model = path_str(PATH(extra, "metadata", "ls_model_name"));
    if (!f->model)
        f->model = path_str(PATH(extra, "invocation_params", "model"));
    if (!f->model)
        f->model = path_str(PATH(extra, "invocation_params", "model_name"));
    if (!f->model)
        f->model = path_str(PATH(out, "llm_output", "model_name"));
    f->system = path_str(PATH(extra, "metadata", "ls_provider"));
    f->in_tokens = get(run, "prompt_tokens");
    if (!cJSON_IsNumber(f->in_tokens))
        f->in_tokens = PATH(out, "llm_output", "token_usage", "prompt_tokens");
    if (!cJSON_IsNumber(f->in_tokens))
        f->in_tokens = PATH(out, "usage_metadata", "input_tokens");
    f->out_tokens = get(run, "completion_tokens");
    if (!cJSON_IsNumber(f->out_tokens))
        f->out_tokens =
            PATH(out, "llm_output", "token_usage", "completion_tokens");
    if (!cJSON_IsNumber(f->out_tokens))
        f->out_tokens = PATH(out, "usage_metadata", "output_tokens");
    if (!cJSON_IsNumber(f->in_tokens))
        f->in_tokens = NULL;
    if (!cJSON_IsNumber(f->out_tokens))
        f->out_tokens = NULL;
    if (!llm)
        return;
    const cJSON *in = get(run, "inputs");
    f->prompt = get(in, "prompts");
    if (cJSON_IsArray(f->prompt) && cJSON_GetArraySize(f->prompt) == 1)
        f->prompt = cJSON_GetArrayItem(f->prompt, 0);
    if (!f->prompt)
        f->prompt = get(in, "messages");
    /* generations: [[{text, message}]] */
    const cJSON *g = PATH(out, "generations", "0", "0");
    f->completion = path_str(get(g, "text")) ? get(g, "text") : NULL;
    if (!f->completion)
        f->completion = get(g, "message");
    if (!f->completion)
        f->completion = get(out, "output");
}

static const char *langsmith_kind(const char *run_type)
{
    if (!run_type)
        return "span";
    if (!strcmp(run_type, "llm") || !strcmp(run_type, "chat_model"))
        return "llm_call";
    if (!strcmp(run_type, "tool"))
        return "tool_call";
    if (!strcmp(run_type, "retriever"))
        return "retrieval";
    return "span";
}

/* One run, and the runs nested in its child_runs (a LangSmith tree as one
 * object) as records of their own under it; parent (NULL: its own
 * parent_run_id) is the run it was nested in. */
static int langsmith_tree(struct imp *m, const cJSON *run, const char *pos,
                          const char *parent, int depth);

static int langsmith_run(struct imp *m, const cJSON *run, const char *pos)
{
    return langsmith_tree(m, run, pos, NULL, 0);
}

static int langsmith_one(struct imp *m, const cJSON *run, const char *pos,
                         const char *nested_in, char **id_out)
{
    if (!cJSON_IsObject(run))
        return fo_err_set(m->err, FO_E_INVALID, "%s: not a run object", pos);
    if (get(run, "resourceSpans"))
        return fo_err_set(m->err, FO_E_INVALID,
                          "%s: OTLP/JSON, not a LangSmith run (use the otel "
                          "format)",
                          pos);
    if (!get(run, "id") && !get(run, "run_type"))
        return fo_err_set(m->err, FO_E_INVALID,
                          "%s: not a LangSmith run (no \"id\", no "
                          "\"run_type\"); an export is a JSON array of runs, "
                          "{\"runs\": [...]} or one run a line",
                          pos);
    char *id = id_text(get(run, "id"));
    if (!id)
        return fo_err_set(m->err, FO_E_INVALID, "%s: no \"id\" (a string)",
                          pos);
    const cJSON *p = no_id(get(run, "parent_run_id"));
    char *parent_id = p && !cJSON_IsNull(p) ? id_text(p)
                      : nested_in           ? strdup(nested_in)
                                            : NULL;
    if ((p && !cJSON_IsNull(p) && !parent_id) ||
        (!p && nested_in && !parent_id)) {
        free(id);
        return fo_err_set(m->err, FO_E_INVALID,
                          "%s: parent_run_id: not a string id", pos);
    }
    const char *run_type = str(run, "run_type");
    const char *kind = langsmith_kind(run_type);
    struct lifted f = {0};
    langsmith_lift(run, !strcmp(kind, "llm_call"), &f);
    cJSON *b = body_new("langsmith", id, parent_id, str(run, "name"),
                        get(run, "start_time"), get(run, "end_time"));
    /* the record without its children: each is a record of its own */
    cJSON *rec = cJSON_Duplicate(run, 1);
    if (rec)
        cJSON_DeleteItemFromObjectCaseSensitive(rec, "child_runs");
    if (!b || !rec || !lift_into(b, &f) ||
        !put_copy(b, "trace_id", get(run, "trace_id")) ||
        (run_type && !cJSON_AddStringToObject(b, "run_type", run_type)) ||
        !put(b, "record", rec)) {
        cJSON_Delete(b);
        cJSON_Delete(rec);
        free(id);
        free(parent_id);
        return nomem(m->err);
    }
    *id_out = strdup(id);
    if (!*id_out) {
        cJSON_Delete(b);
        free(id);
        free(parent_id);
        return nomem(m->err);
    }
    int rc = add_rec(m, id, parent_id, pos, kind, str(run, "name"), b);
    if (rc) {
        free(*id_out);
        *id_out = NULL;
    }
    return rc;
}

static int langsmith_tree(struct imp *m, const cJSON *run, const char *pos,
                          const char *parent, int depth)
{
    char *id = NULL;
    int rc = langsmith_one(m, run, pos, parent, &id);
    const cJSON *kids = rc ? NULL : get(run, "child_runs");
    if (!rc && kids && !cJSON_IsArray(kids) && !cJSON_IsNull(kids))
        rc = fo_err_set(m->err, FO_E_INVALID, "%s: child_runs: not an array",
                        pos);
    size_t i = 0;
    const cJSON *k;
    cJSON_ArrayForEach (k, (rc || !cJSON_IsArray(kids) ? NULL : kids)) {
        char cpos[POS_MAX];
        snprintf(cpos, sizeof(cpos), "%.*s.child_runs[%zu]", POS_MAX / 2, pos,
                 i++);
        if (depth >= 64)
            rc = fo_err_set(m->err, FO_E_INVALID, "%s: nested too deep", cpos);
        else
            rc = langsmith_tree(m, k, cpos, id, depth + 1);
        if (rc)
            break;
    }
    free(id);
    return rc;
}

/* ---- JSONL ------------------------------------------------------------ */

/* Calls fn for every non-blank line, parsed; a line that is not JSON is
 * FO_E_JSON naming it. */
static int each_line(struct imp *m, const char *data, size_t len,
                     int (*fn)(struct imp *, const cJSON *, const char *))
{
    size_t lineno = 0, at = 0;
    while (at < len) {
        const char *s = data + at;
        const char *nl = memchr(s, '\n', len - at);
        size_t n = nl ? (size_t)(nl - s) : len - at;
        at += n + (nl ? 1 : 0);
        lineno++;
        size_t t = n;
        while (t > 0 &&
               (s[t - 1] == '\r' || s[t - 1] == ' ' || s[t - 1] == '\t'))
            t--;
        size_t h = 0;
        while (h < t && (s[h] == ' ' || s[h] == '\t'))
            h++;
        if (h == t)
            continue; /* a blank line is no record */
        cJSON *o = NULL;
        char pos[POS_MAX];
        snprintf(pos, sizeof(pos), "line %zu", lineno);
        int rc = fo_json_parse(s, t, &o, m->err);
        if (rc) {
            fo_err_prefix(m->err, "%s", pos);
            return rc;
        }
        rc = fn(m, o, pos);
        cJSON_Delete(o);
        if (rc)
            return rc;
    }
    return FO_OK;
}

static int langsmith_line(struct imp *m, const cJSON *o, const char *pos)
{
    if (cJSON_IsArray(o))
        return fo_err_set(m->err, FO_E_INVALID,
                          "%s: an array; a LangSmith export is one JSON "
                          "array of runs, or one run a line",
                          pos);
    return langsmith_run(m, o, pos);
}

static int read_langsmith(struct imp *m, const char *data, size_t len)
{
    size_t h = 0;
    while (h < len && (data[h] == ' ' || data[h] == '\t' || data[h] == '\r' ||
                       data[h] == '\n'))
        h++;
    cJSON *doc = NULL;
    int rc = FO_OK;
    if (h < len && data[h] == '[') {
        rc = fo_json_parse(data, len, &doc, m->err); /* names the byte */
        if (rc)
            return rc;
    } else {
        /* {"runs": [...]} as one object, else one run a line */
        struct fo_err ignored;
        if (fo_json_parse(data, len, &doc, &ignored) != FO_OK)
            return each_line(m, data, len, langsmith_line);
        if (!cJSON_IsArray(get(doc, "runs"))) { /* one run, or not runs */
            rc = langsmith_run(m, doc, "the run");
            cJSON_Delete(doc);
            return rc;
        }
    }
    const cJSON *runs = cJSON_IsArray(doc) ? doc : get(doc, "runs");
    char pos[POS_MAX];
    size_t i = 0;
    const cJSON *run;
    cJSON_ArrayForEach (run, runs) {
        snprintf(pos, sizeof(pos), "runs[%zu]", i++);
        if ((rc = langsmith_run(m, run, pos)))
            break;
    }
    cJSON_Delete(doc);
    return rc;
}

/* The JSONL kinds: the import kinds as they are, and a few synonyms;
 * anything else is an event (its own kind kept in the record). */
static const char *jsonl_kind(const char *k)
{
    static const char *const map[][2] = {
        {"span", "span"},           {"llm_call", "llm_call"},
        {"tool_call", "tool_call"}, {"retrieval", "retrieval"},
        {"event", "event"},         {"llm", "llm_call"},
        {"tool", "tool_call"},      {"retriever", "retrieval"},
    };
    for (size_t i = 0; k && i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcmp(k, map[i][0]))
            return map[i][1];
    return "event";
}

static int jsonl_event(struct imp *m, const cJSON *o, const char *pos)
{
    if (!cJSON_IsObject(o))
        return fo_err_set(m->err, FO_E_INVALID,
                          "%s: not an object {id, parent?, kind?, actor?, "
                          "ts?, ...}%s",
                          pos,
                          cJSON_IsArray(o) ? " (a LangSmith export? use the "
                                             "langsmith format)"
                                           : "");
    if (get(o, "resourceSpans"))
        return fo_err_set(m->err, FO_E_INVALID,
                          "%s: OTLP/JSON, not an event (use the otel format)",
                          pos);
    char *id = id_text(get(o, "id"));
    if (!id)
        return fo_err_set(m->err, FO_E_INVALID,
                          "%s: no \"id\" (a string or an integer)", pos);
    const cJSON *p = no_id(get(o, "parent"));
    char *parent_id = p && !cJSON_IsNull(p) ? id_text(p) : NULL;
    const cJSON *actor = get(o, "actor");
    int bad_actor = actor && (!cJSON_IsString(actor) ||
                              ledger_check_actor(actor->valuestring, NULL));
    if ((p && !cJSON_IsNull(p) && !parent_id) || bad_actor) {
        free(id);
        free(parent_id);
        return fo_err_set(m->err, FO_E_INVALID,
                          bad_actor ? "%s: actor: a string of 1-128 bytes"
                                    : "%s: parent: not a string or integer id",
                          pos);
    }
    struct lifted f = {0};
    f.model = str(o, "model");
    f.system = str(o, "system");
    const cJSON *tokens = get(o, "tokens");
    f.in_tokens = tokens ? get(tokens, "input") : get(o, "input_tokens");
    f.out_tokens = tokens ? get(tokens, "output") : get(o, "output_tokens");
    f.prompt = get(o, "prompt");
    f.completion = get(o, "completion");
    cJSON *b = body_new("jsonl", id, parent_id, str(o, "name"), get(o, "ts"),
                        get(o, "end"));
    if (!b || !lift_into(b, &f) || !put_copy(b, "record", o)) {
        cJSON_Delete(b);
        free(id);
        free(parent_id);
        return nomem(m->err);
    }
    return add_rec(m, id, parent_id, pos, jsonl_kind(str(o, "kind")),
                   actor ? actor->valuestring : NULL, b);
}

/* ---- checking, ordering, appending ------------------------------------ */

static int by_id(const void *a, const void *b)
{
    const struct rec *x = *(const struct rec *const *)a;
    const struct rec *y = *(const struct rec *const *)b;
    int c = strcmp(x->id, y->id);
    return c ? c : (x < y ? -1 : x > y);
}

static int by_key(const void *key, const void *elem)
{
    const struct rec *y = *(const struct rec *const *)elem;
    return strcmp(key, y->id);
}

/* Unique ids, parents resolved (a missing one: dangling), no cycles; each
 * record's place in an order where parents come first (file order
 * otherwise). order[] gets the records in that order. */
static int link(struct imp *m, size_t *order)
{
    struct rec **s = malloc(m->n * sizeof(*s));
    if (!s)
        return nomem(m->err);
    for (size_t i = 0; i < m->n; i++)
        s[i] = &m->v[i];
    qsort(s, m->n, sizeof(*s), by_id);
    int rc = FO_OK;
    for (size_t i = 1; i < m->n && !rc; i++)
        if (!strcmp(s[i - 1]->id, s[i]->id))
            rc = fo_err_set(m->err, FO_E_INVALID,
                            "%s: duplicate id \"%.64s\" (first at %s)",
                            s[i]->pos, s[i]->id, s[i - 1]->pos);
    for (size_t i = 0; i < m->n && !rc; i++) {
        struct rec *r = &m->v[i];
        if (!r->parent_id)
            continue;
        struct rec **p = bsearch(r->parent_id, s, m->n, sizeof(*s), by_key);
        /* bsearch may land on any of equal ids: there are none */
        if (p)
            r->parent = (size_t)(*p - m->v);
        else
            r->dangling = 1;
    }
    free(s);
    size_t placed = 0;
    size_t *walk = rc ? NULL : malloc(m->n * sizeof(*walk));
    if (!rc && !walk)
        rc = nomem(m->err);
    for (size_t i = 0; i < m->n && !rc; i++) {
        size_t top = 0, cur = i;
        while (cur != NONE && m->v[cur].state == 0) {
            m->v[cur].state = 1;
            walk[top++] = cur;
            cur = m->v[cur].parent;
        }
        if (cur != NONE && m->v[cur].state == 1) {
            struct fo_buf ring;
            fo_buf_init(&ring, 200);
            size_t x = cur;
            do {
                if (fo_buf_printf(&ring, "%.40s -> ", m->v[x].id))
                    break;
                x = m->v[x].parent;
            } while (x != cur);
            rc = fo_err_set(m->err, FO_E_INVALID,
                            "%s: a cycle in the parent links (id -> parent "
                            "id): %s%.40s",
                            m->v[cur].pos, ring.data ? ring.data : "",
                            m->v[cur].id);
            fo_buf_release(&ring);
            break;
        }
        while (top > 0) {
            size_t r = walk[--top];
            m->v[r].state = 2;
            m->v[r].at = placed;
            order[placed++] = r;
        }
    }
    free(walk);
    return rc;
}

static void imp_free(struct imp *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free(m->v[i].id);
        free(m->v[i].parent_id);
        cJSON_Delete(m->v[i].body);
    }
    free(m->v);
}

static int count_kind(cJSON *by_kind, const char *kind)
{
    cJSON *c = cJSON_GetObjectItemCaseSensitive(by_kind, kind);
    if (c) {
        cJSON_SetNumberValue(c, c->valuedouble + 1);
        return 1;
    }
    return cJSON_AddNumberToObject(by_kind, kind, 1) != NULL;
}

/* The import entry's body. */
static cJSON *import_body(const struct imp *m, const struct import_source *src,
                          const char *sha, size_t roots, size_t dangling)
{
    cJSON *b = cJSON_CreateObject();
    cJSON *s = b ? cJSON_AddObjectToObject(b, "source") : NULL;
    cJSON *c = b ? cJSON_AddObjectToObject(b, "counts") : NULL;
    cJSON *k = c ? cJSON_AddObjectToObject(c, "by_kind") : NULL;
    cJSON *d = b ? cJSON_AddArrayToObject(b, "dangling") : NULL;
    int ok = s && k && d && cJSON_AddStringToObject(b, "format", m->format) &&
             (!src->name || cJSON_AddStringToObject(s, "name", src->name)) &&
             cJSON_AddStringToObject(s, "sha256", sha) &&
             fo_json_add_int(s, "bytes", (long long)src->len) &&
             fo_json_add_int(c, "records", (long long)m->n) &&
             fo_json_add_int(c, "roots", (long long)roots) &&
             fo_json_add_int(c, "dangling", (long long)dangling);
    for (size_t i = 0; ok && i < m->n; i++) {
        const struct rec *r = &m->v[i];
        ok = count_kind(k, r->kind);
        if (ok && r->dangling) {
            cJSON *x = cJSON_CreateObject();
            ok = x && cJSON_AddItemToArray(d, x) &&
                 cJSON_AddStringToObject(x, "id", r->id) &&
                 cJSON_AddStringToObject(x, "parent_id", r->parent_id);
        }
    }
    if (!ok) {
        cJSON_Delete(b);
        return NULL;
    }
    return b;
}

/* The result object, from the committed requests. */
static cJSON *result(const struct imp *m, const struct ledger_append *reqs,
                     const size_t *order, const char *name, const char *sha,
                     size_t len, size_t roots)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *k = o ? cJSON_AddObjectToObject(o, "by_kind") : NULL;
    cJSON *d = o ? cJSON_AddArrayToObject(o, "dangling") : NULL;
    cJSON *es = o ? cJSON_AddArrayToObject(o, "entries") : NULL;
    int ok = k && d && es &&
             fo_json_add_int(o, "import_seq", reqs[0].entry.seq) &&
             cJSON_AddStringToObject(o, "format", m->format) &&
             (!name || cJSON_AddStringToObject(o, "name", name)) &&
             cJSON_AddStringToObject(o, "sha256", sha) &&
             fo_json_add_int(o, "bytes", (long long)len) &&
             fo_json_add_int(o, "records", (long long)m->n) &&
             fo_json_add_int(o, "roots", (long long)roots) &&
             fo_json_add_int(o, "first_seq", reqs[0].entry.seq) &&
             fo_json_add_int(o, "last_seq", reqs[m->n].entry.seq);
    for (size_t j = 0; ok && j < m->n; j++) {
        const struct rec *r = &m->v[order[j]];
        const struct ledger_entry *e = &reqs[j + 1].entry;
        cJSON *x = cJSON_CreateObject();
        ok = count_kind(k, r->kind) && x && cJSON_AddItemToArray(es, x) &&
             cJSON_AddStringToObject(x, "id", r->id) &&
             fo_json_add_int(x, "seq", e->seq) &&
             fo_json_add_int(x, "parent", e->parent) &&
             cJSON_AddStringToObject(x, "kind", e->kind);
        if (ok && r->dangling) {
            cJSON *y = cJSON_CreateObject();
            ok = y && cJSON_AddItemToArray(d, y) &&
                 cJSON_AddStringToObject(y, "id", r->id) &&
                 cJSON_AddStringToObject(y, "parent_id", r->parent_id) &&
                 fo_json_add_int(y, "seq", e->seq);
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int import_run(struct ledger *l, import_batch_fn batch, void *hook,
               const struct import_source *src, cJSON **out, struct fo_err *err)
{
    if (!import_format_known(src->format))
        return fo_err_set(err, FO_E_INVALID,
                          "format \"%.32s\": not otel, langsmith or jsonl",
                          src->format ? src->format : "");
    if (src->len > IMPORT_MAX_BYTES)
        return fo_err_set(err, FO_E_TOO_LARGE,
                          "the source is %zu bytes; the limit is %u (64 MiB)",
                          src->len, IMPORT_MAX_BYTES);
    struct imp m = {.format = src->format, .err = err};
    int rc = !strcmp(src->format, "otel") ? read_otel(&m, src->data, src->len)
             : !strcmp(src->format, "langsmith")
                 ? read_langsmith(&m, src->data, src->len)
                 : each_line(&m, src->data, src->len, jsonl_event);
    if (rc == FO_E_JSON && !strcmp(src->format, "jsonl")) {
        cJSON *doc = NULL;
        struct fo_err ignored;
        if (fo_json_parse(src->data, src->len, &doc, &ignored) == FO_OK)
            rc = fo_err_set(
                err, FO_E_INVALID,
                "one JSON document over several lines, not JSON "
                "lines (%s)",
                get(doc, "resourceSpans") ? "OTLP/JSON: use the otel format"
                : cJSON_IsArray(doc)      ? "runs? use the langsmith format"
                                          : "put each event on one line");
        cJSON_Delete(doc);
    }
    if (!rc && m.n == 0)
        rc = fo_err_set(err, FO_E_INVALID, "no %s in the %s source",
                        !strcmp(src->format, "otel")        ? "spans"
                        : !strcmp(src->format, "langsmith") ? "runs"
                                                            : "events",
                        src->format);
    size_t n = m.n;
    size_t *order = rc ? NULL : malloc(n * sizeof(*order));
    struct ledger_append *reqs = rc ? NULL : calloc(n + 1, sizeof(*reqs));
    struct fo_buf *bodies = rc ? NULL : calloc(n + 1, sizeof(*bodies));
    if (!rc && (!order || !reqs || !bodies))
        rc = nomem(err);
    if (!rc)
        rc = link(&m, order);
    uint8_t digest[32];
    char sha[65];
    fo_sha256(src->data, src->len, digest);
    fo_hex(digest, 32, sha);
    size_t roots = 0, dangling = 0, made = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        roots += !m.v[i].parent_id;
        dangling += m.v[i].dangling;
        if (m.v[i].dangling && !cJSON_AddTrueToObject(m.v[i].body, "dangling"))
            rc = nomem(err);
    }
    size_t max = ledger_max_body(l);
    /* reqs[0]: the import entry; reqs[j + 1]: the record order[j] */
    for (size_t j = 0; !rc && j <= n; j++) {
        struct rec *r = j ? &m.v[order[j - 1]] : NULL;
        cJSON *own = r ? NULL : import_body(&m, src, sha, roots, dangling);
        fo_buf_init(&bodies[j], max);
        made++;
        if (!r && !own)
            rc = nomem(err);
        if (!rc)
            rc = fo_json_canon(r ? r->body : own, &bodies[j], err);
        cJSON_Delete(own);
        if (rc == FO_E_TOO_LARGE)
            rc = fo_err_set(err, FO_E_TOO_LARGE,
                            "%s: the entry's body is over %zu bytes in "
                            "canonical form (the ledger's body limit)",
                            r ? r->pos : "the import entry", max);
        else if (rc)
            fo_err_prefix(err, "%s", r ? r->pos : "the import entry");
        if (rc)
            break;
        reqs[j] = (struct ledger_append){
            .actor = r ? r->actor : "import",
            .kind = r ? r->kind : "import",
            .parent = LEDGER_NO_PARENT,
            .parent_back = !r ? 0
                           : r->parent == NONE
                               ? (int64_t)j
                               : (int64_t)(j - 1 - m.v[r->parent].at),
            .body = bodies[j].data ? bodies[j].data : "",
            .body_len = bodies[j].len,
        };
        /* checked here, so the batch has nothing to skip: a skipped
         * request would fail its children */
        rc = ledger_check_actor(reqs[j].actor, err);
        if (rc)
            fo_err_prefix(err, "%s", r ? r->pos : "the import entry");
    }
    if (!rc)
        rc = batch ? batch(hook, reqs, n + 1, err)
                   : ledger_append_batch(l, reqs, n + 1, err);
    for (size_t j = 0; !rc && j <= n; j++)
        if (reqs[j].rc) { /* checked above: only a storage fault is left */
            rc = reqs[j].rc;
            *err = reqs[j].err;
        }
    if (!rc) {
        *out = result(&m, reqs, order, src->name, sha, src->len, roots);
        if (!*out)
            rc = nomem(err);
    }
    for (size_t j = 0; j < made; j++)
        fo_buf_release(&bodies[j]);
    free(bodies);
    free(reqs);
    free(order);
    imp_free(&m);
    return rc;
}
