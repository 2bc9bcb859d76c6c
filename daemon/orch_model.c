/* orch_model: the chat (OpenAI-compatible) and Anthropic model executors.
 * A call is a small state machine on a caller's event_base (thousands in
 * flight on one thread): each attempt is one request of the HTTP client
 * (httpc.h: lookup, TLS, connect and deadline timers, the response cap),
 * and the call adds backoff, retries, fallover and classified errors. The
 * blocking call runs one on a private base. */
#include "daemon/orch_model.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/http.h>

#include "daemon/httpc.h"
#include "daemon/orch_types_int.h"
#include "ledger/fo_json.h"
#include "ledger/ledger.h" /* ledger_mono_us */

#define ANTHROPIC_URL "https://api.anthropic.com"
#define ANTHROPIC_VERSION "2023-06-01"
#define SNIPPET_MAX 160    /* bytes of an upstream error message we repeat */
#define RETRY_AFTER_MAX 60 /* seconds of Retry-After we consider at all */

struct provider {
    char *name;
    int api;
    char *model;
    char *key_env;
    int tier;
    int max_tokens;
    struct orch_forge forge;
    struct httpc_url url; /* its path is the API's, with the query */
};

struct orch_model {
    struct provider *p;
    size_t n;
    int connect_ms, timeout_ms, attempts, backoff_ms, backoff_max_ms;
    int fallover;
    size_t response_max;
    struct httpc_tls *tls;   /* NULL when no provider uses https */
    struct httpc_pool *pool; /* for calls on pool_base only */
    struct event_base *pool_base;
};

void orch_model_set_pool(struct orch_model *m, struct event_base *base,
                         struct httpc_pool *pool)
{
    if (!m)
        return;
    m->pool = pool;
    m->pool_base = pool ? base : NULL;
}

/* ---- configuration ------------------------------------------------------ */

static void provider_release(struct provider *p)
{
    free(p->name);
    free(p->model);
    free(p->key_env);
    httpc_url_release(&p->url);
}

void orch_model_free(struct orch_model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        provider_release(&m->p[i]);
    free(m->p);
    httpc_tls_free(m->tls);
    free(m);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Parses url (httpc) and makes its path the API's by the rule in the
 * header: trailing slashes dropped, the API path appended, the query kept. */
static int parse_url(struct provider *p, const char *url, size_t i,
                     struct fo_err *err)
{
    int rc = httpc_url_parse(url, &p->url, err);
    if (rc) {
        if (rc == FO_E_INVALID)
            fo_err_prefix(err, "provider %zu: url", i);
        return rc;
    }
    char *up = p->url.path;
    char *q = strchr(up, '?');
    size_t ul = q ? (size_t)(q - up) : strlen(up);
    while (ul > 0 && up[ul - 1] == '/')
        ul--;
    const char *full =
        p->api == ORCH_EXEC_CHAT ? "/chat/completions" : "/messages";
    const char *v1 =
        p->api == ORCH_EXEC_CHAT ? "/v1/chat/completions" : "/v1/messages";
    struct fo_buf path;
    fo_buf_init(&path, ORCH_MODEL_URL_MAX);
    int r2 = fo_buf_append(&path, up, ul) || fo_buf_putc(&path, '\0');
    if (!r2) {
        path.len--;
        if (!ends_with(path.data, full))
            r2 = fo_buf_puts(&path, ends_with(path.data, "/v1") ? full : v1);
    }
    if (!r2 && q)
        r2 = fo_buf_puts(&path, q);
    char *np = r2 ? NULL : fo_buf_detach(&path, NULL);
    fo_buf_release(&path);
    if (!np)
        return fo_err_set(err, r2 == FO_E_TOO_LARGE ? FO_E_INVALID : FO_E_NOMEM,
                          "provider %zu: url: too long", i);
    free(p->url.path);
    p->url.path = np;
    return FO_OK;
}

int orch_model_create(const struct orch_model_config *cfg,
                      struct orch_model **out, struct fo_err *err)
{
    struct orch_model *m = NULL;
    int rc = FO_E_INVALID;
    if (!cfg || cfg->n_providers == 0 || !cfg->providers) {
        fo_err_set(err, rc, "models: no provider configured");
        goto out;
    }
    if (cfg->n_providers > ORCH_MODEL_PROVIDERS_MAX ||
        cfg->connect_timeout_ms < 0 || cfg->timeout_ms < 0 ||
        cfg->attempts < 0 || cfg->attempts > ORCH_MODEL_ATTEMPTS_MAX ||
        cfg->backoff_ms < 0 || cfg->backoff_max_ms < 0) {
        fo_err_set(err, rc,
                   "models: a limit out of range (providers <= %d, attempts "
                   "<= %d, no negative times)",
                   ORCH_MODEL_PROVIDERS_MAX, ORCH_MODEL_ATTEMPTS_MAX);
        goto out;
    }
    m = calloc(1, sizeof(*m));
    if (m)
        m->p = calloc(cfg->n_providers, sizeof(*m->p));
    if (!m || !m->p) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    int any_tls = 0;
    for (size_t i = 0; i < cfg->n_providers; i++) {
        const struct orch_model_provider *c = &cfg->providers[i];
        struct provider *p = &m->p[m->n++];
        rc = FO_E_INVALID;
        if (c->api != ORCH_EXEC_CHAT && c->api != ORCH_EXEC_ANTHROPIC) {
            fo_err_set(err, rc, "provider %zu: api: must be chat or anthropic",
                       i);
            goto out;
        }
        if (!c->model || !orch_name_valid(c->model, ORCH_MODEL_MAX)) {
            fo_err_set(err, rc,
                       "provider %zu: model: must be 1-%d bytes without "
                       "controls",
                       i, ORCH_MODEL_MAX);
            goto out;
        }
        if (c->name && !orch_name_valid(c->name, ORCH_NAME_MAX)) {
            fo_err_set(err, rc, "provider %zu: name: not a name", i);
            goto out;
        }
        if (c->tier != ORCH_TIER_ANY &&
            (c->tier < ORCH_TIER_CHEAP || c->tier > ORCH_TIER_FRONTIER)) {
            fo_err_set(err, rc, "provider %zu: tier: not a tier", i);
            goto out;
        }
        if (c->api_key_env && !orch_name_valid(c->api_key_env, 256)) {
            fo_err_set(err, rc, "provider %zu: api_key_env: not a name", i);
            goto out;
        }
        if (c->max_tokens < 0) {
            fo_err_set(err, rc, "provider %zu: max_tokens: negative", i);
            goto out;
        }
        if (c->malformed_tries < 0 ||
            c->malformed_tries > ORCH_MALFORMED_RETRIES_MAX + 1) {
            fo_err_set(err, rc,
                       "provider %zu: malformed_retries: must be 0..%d", i,
                       ORCH_MALFORMED_RETRIES_MAX);
            goto out;
        }
        p->api = c->api;
        p->tier = c->tier;
        p->forge = (struct orch_forge){
            .rescue = !c->no_rescue,
            .respond_tool = c->respond_tool != 0,
            .malformed_retries = c->malformed_tries
                                     ? c->malformed_tries - 1
                                     : ORCH_MALFORMED_RETRIES_DEFAULT};
        p->max_tokens =
            c->max_tokens ? c->max_tokens : ORCH_MODEL_MAX_TOKENS_DEFAULT;
        const char *name = c->name ? c->name : c->model;
        size_t nl = orch_utf8_prefix(name, strlen(name), ORCH_NAME_MAX);
        p->name = malloc(nl + 1);
        if (p->name) {
            memcpy(p->name, name, nl);
            p->name[nl] = '\0';
        }
        p->model = orch_strdup(c->model);
        p->key_env = c->api_key_env ? orch_strdup(c->api_key_env) : NULL;
        if (!p->name || !p->model || (c->api_key_env && !p->key_env)) {
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
            goto out;
        }
        const char *url = c->url;
        if (!url && c->api == ORCH_EXEC_ANTHROPIC)
            url = ANTHROPIC_URL;
        if (!url) {
            fo_err_set(err, rc, "provider %zu: url: required for chat", i);
            goto out;
        }
        rc = parse_url(p, url, i, err);
        if (rc)
            goto out;
        any_tls |= p->url.tls;
    }
    m->connect_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms
                                            : ORCH_MODEL_CONNECT_MS_DEFAULT;
    m->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : ORCH_TIMEOUT_MS_DEFAULT;
    m->attempts = cfg->attempts ? cfg->attempts : ORCH_MODEL_ATTEMPTS_DEFAULT;
    m->backoff_ms =
        cfg->backoff_ms ? cfg->backoff_ms : ORCH_MODEL_BACKOFF_MS_DEFAULT;
    m->backoff_max_ms = cfg->backoff_max_ms ? cfg->backoff_max_ms
                                            : ORCH_MODEL_BACKOFF_MAX_MS_DEFAULT;
    m->response_max =
        cfg->response_max ? cfg->response_max : ORCH_MODEL_RESPONSE_MAX_DEFAULT;
    if (m->response_max > (size_t)INT_MAX)
        m->response_max = (size_t)INT_MAX;
    m->fallover = cfg->fallover;
    if (any_tls || cfg->ca_file) {
        rc = httpc_tls_create(cfg->ca_file, &m->tls, err);
        if (rc)
            goto out;
    }
    *out = m;
    m = NULL;
    rc = FO_OK;
out:
    orch_model_free(m);
    return rc;
}

static int get_str(const cJSON *j, const char *k, const char **out,
                   struct fo_err *err, const char *where)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    if (!v)
        return FO_OK;
    if (!cJSON_IsString(v))
        return fo_err_set(err, FO_E_INVALID, "%s%s: must be a string", where,
                          k);
    *out = v->valuestring;
    return FO_OK;
}

static int get_int(const cJSON *j, const char *k, long long max, int *out,
                   struct fo_err *err, const char *where)
{
    long long v;
    int rc = fo_json_get_int(j, k, 0, max, &v);
    if (rc == FO_E_NOT_FOUND)
        return FO_OK;
    if (rc)
        return fo_err_set(err, FO_E_INVALID, "%s%s: must be 0..%lld", where, k,
                          max);
    *out = (int)v;
    return FO_OK;
}

static int get_bool(const cJSON *j, const char *k, int *out, struct fo_err *err,
                    const char *where)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    if (!v)
        return FO_OK;
    if (!cJSON_IsBool(v))
        return fo_err_set(err, FO_E_INVALID, "%s%s: must be a boolean", where,
                          k);
    *out = cJSON_IsTrue(v);
    return FO_OK;
}

/* A provider's forge options: "rescue", "respond_tool",
 * "malformed_retries", and the gateway's "gateway_forge". */
static int forge_parse(const cJSON *e, struct orch_model_provider *p,
                       struct fo_err *err, const char *where)
{
    int rescue = 1, tries = -1;
    int rc = get_bool(e, "rescue", &rescue, err, where);
    if (!rc)
        rc = get_bool(e, "respond_tool", &p->respond_tool, err, where);
    if (!rc)
        rc = get_bool(e, "gateway_forge", &p->gateway_forge, err, where);
    if (!rc)
        rc = get_int(e, "malformed_retries", ORCH_MALFORMED_RETRIES_MAX, &tries,
                     err, where);
    p->no_rescue = !rescue;
    if (!rc && tries >= 0)
        p->malformed_tries = tries + 1;
    return rc;
}

int orch_model_config_parse(const cJSON *j, struct orch_model_config *cfg,
                            struct orch_model_provider **providers,
                            struct fo_err *err)
{
    static const char *const tiers[] = {"cheap", "capable", "frontier"};
    struct orch_model_provider *pv = NULL;
    int rc = FO_E_INVALID;
    *cfg = (struct orch_model_config){0};
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(j, "providers");
    if (!cJSON_IsObject(j) || !cJSON_IsArray(ps) ||
        cJSON_GetArraySize(ps) < 1 ||
        cJSON_GetArraySize(ps) > ORCH_MODEL_PROVIDERS_MAX) {
        fo_err_set(err, rc, "models: providers: must be a list of 1-%d",
                   ORCH_MODEL_PROVIDERS_MAX);
        goto out;
    }
    size_t n = (size_t)cJSON_GetArraySize(ps);
    pv = calloc(n, sizeof(*pv));
    if (!pv) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach (e, ps) {
        char where[48];
        snprintf(where, sizeof(where), "models: providers[%zu].", i);
        struct orch_model_provider *p = &pv[i++];
        const char *api = NULL, *tier = NULL;
        p->tier = ORCH_TIER_ANY;
        if (!cJSON_IsObject(e)) {
            fo_err_set(err, rc, "%s: must be an object", where);
            goto out;
        }
        if (get_str(e, "name", &p->name, err, where) ||
            get_str(e, "api", &api, err, where) ||
            get_str(e, "url", &p->url, err, where) ||
            get_str(e, "model", &p->model, err, where) ||
            get_str(e, "api_key_env", &p->api_key_env, err, where) ||
            get_str(e, "tier", &tier, err, where) ||
            get_int(e, "max_tokens", 1000000, &p->max_tokens, err, where) ||
            forge_parse(e, p, err, where))
            goto out;
        if (!api || (strcmp(api, "chat") && strcmp(api, "anthropic"))) {
            fo_err_set(err, rc, "%sapi: must be \"chat\" or \"anthropic\"",
                       where);
            goto out;
        }
        p->api =
            strcmp(api, "chat") == 0 ? ORCH_EXEC_CHAT : ORCH_EXEC_ANTHROPIC;
        if (tier && strcmp(tier, "any") != 0) {
            p->tier = -2;
            for (int t = 0; t < 3; t++)
                if (strcmp(tier, tiers[t]) == 0)
                    p->tier = t;
            if (p->tier == -2) {
                fo_err_set(err, rc,
                           "%stier: must be cheap, capable, frontier or any",
                           where);
                goto out;
            }
        }
        if (!p->model) {
            fo_err_set(err, rc, "%smodel: required", where);
            goto out;
        }
    }
    int rmax = 0;
    const cJSON *fo = cJSON_GetObjectItemCaseSensitive(j, "fallover");
    if (fo && !cJSON_IsBool(fo)) {
        fo_err_set(err, rc, "models: fallover: must be a boolean");
        goto out;
    }
    cfg->fallover = cJSON_IsTrue(fo);
    if (get_int(j, "connect_timeout_ms", INT_MAX, &cfg->connect_timeout_ms, err,
                "models: ") ||
        get_int(j, "timeout_ms", INT_MAX, &cfg->timeout_ms, err, "models: ") ||
        get_int(j, "response_max", INT_MAX, &rmax, err, "models: ") ||
        get_int(j, "attempts", ORCH_MODEL_ATTEMPTS_MAX, &cfg->attempts, err,
                "models: ") ||
        get_int(j, "backoff_ms", INT_MAX, &cfg->backoff_ms, err, "models: ") ||
        get_int(j, "backoff_max_ms", INT_MAX, &cfg->backoff_max_ms, err,
                "models: ") ||
        get_str(j, "ca_file", &cfg->ca_file, err, "models: "))
        goto out;
    cfg->response_max = (size_t)rmax;
    cfg->providers = pv;
    cfg->n_providers = n;
    *providers = pv;
    pv = NULL;
    rc = FO_OK;
out:
    free(pv);
    return rc;
}

/* ---- bodies ------------------------------------------------------------- */

/* Each message needs a known role and UTF-8 content; a tool message the id
 * of its call; an assistant's tool calls are an array of {id, name,
 * arguments} strings. */
static int msgs_check(const struct orch_model_msg *msgs, size_t n,
                      struct fo_err *err)
{
    for (size_t i = 0; i < n; i++) {
        const char *role = msgs[i].role, *c = msgs[i].content;
        if (!role || !c ||
            (strcmp(role, "system") && strcmp(role, "user") &&
             strcmp(role, "assistant") && strcmp(role, "tool")) ||
            !fo_utf8_valid(c, strlen(c)))
            return fo_err_set(err, FO_E_INVALID,
                              "message %zu: needs role system, user, "
                              "assistant or tool and UTF-8 content",
                              i);
        if (!strcmp(role, "tool") &&
            (!msgs[i].tool_call_id || !msgs[i].tool_call_id[0]))
            return fo_err_set(err, FO_E_INVALID,
                              "message %zu: a tool message needs the id of "
                              "its call",
                              i);
        if (msgs[i].tool_calls) {
            cJSON *a = NULL;
            int ok =
                strcmp(role, "assistant") == 0 &&
                fo_json_parse(msgs[i].tool_calls, strlen(msgs[i].tool_calls),
                              &a, NULL) == FO_OK &&
                cJSON_IsArray(a);
            const cJSON *c1;
            cJSON_ArrayForEach (c1, a)
                ok = ok && cJSON_IsString(cJSON_GetObjectItem(c1, "id")) &&
                     cJSON_IsString(cJSON_GetObjectItem(c1, "name")) &&
                     cJSON_IsString(cJSON_GetObjectItem(c1, "arguments"));
            cJSON_Delete(a);
            if (!ok)
                return fo_err_set(err, FO_E_INVALID,
                                  "message %zu: tool calls must be an "
                                  "assistant's array of {id, name, "
                                  "arguments}",
                                  i);
        }
    }
    return FO_OK;
}

/* The tools offered, in p's wire format, added to o. tools has passed
 * tools_check. */
static int add_tools(const struct provider *p, const char *tools,
                     struct orch_toolnames *tn, cJSON *o)
{
    cJSON *in = NULL;
    if (!tools || fo_json_parse(tools, strlen(tools), &in, NULL) != FO_OK)
        return FO_OK;
    int rc = FO_OK;
    if (cJSON_GetArraySize(in) > 0) {
        cJSON *arr = cJSON_AddArrayToObject(o, "tools");
        const cJSON *t;
        rc = arr ? FO_OK : FO_E_NOMEM;
        cJSON_ArrayForEach (t, in) {
            if (rc)
                break;
            const cJSON *name = cJSON_GetObjectItem(t, "name");
            const cJSON *desc = cJSON_GetObjectItem(t, "description");
            const cJSON *schema = cJSON_GetObjectItem(t, "input_schema");
            cJSON *w = cJSON_CreateObject(), *f = w;
            if (w)
                cJSON_AddItemToArray(arr, w);
            if (w && p->api == ORCH_EXEC_CHAT) {
                f = cJSON_AddObjectToObject(w, "function");
                if (!cJSON_AddStringToObject(w, "type", "function"))
                    f = NULL;
            }
            if (!f ||
                !cJSON_AddStringToObject(
                    f, "name", orch_toolnames_wire(tn, name->valuestring)) ||
                (cJSON_IsString(desc) &&
                 !cJSON_AddStringToObject(f, "description",
                                          desc->valuestring)) ||
                !cJSON_AddItemToObject(
                    f, p->api == ORCH_EXEC_CHAT ? "parameters" : "input_schema",
                    schema ? cJSON_Duplicate(schema, 1)
                           : cJSON_Parse("{\"type\":\"object\"}")))
                rc = FO_E_NOMEM;
        }
    }
    cJSON_Delete(in);
    return rc;
}

/* tools is NULL or an array of {name, description?, input_schema?}. */
static int tools_check(const char *tools, struct fo_err *err)
{
    if (!tools)
        return FO_OK;
    cJSON *a = NULL;
    int ok = fo_json_parse(tools, strlen(tools), &a, NULL) == FO_OK &&
             cJSON_IsArray(a);
    const cJSON *t;
    cJSON_ArrayForEach (t, a) {
        const cJSON *d = cJSON_GetObjectItem(t, "description");
        const cJSON *s = cJSON_GetObjectItem(t, "input_schema");
        ok = ok && cJSON_IsString(cJSON_GetObjectItem(t, "name")) &&
             (!d || cJSON_IsString(d)) && (!s || cJSON_IsObject(s));
    }
    cJSON_Delete(a);
    return ok ? FO_OK
              : fo_err_set(err, FO_E_INVALID,
                           "model call: tools must be an array of {name, "
                           "description, input_schema}");
}

/* An assistant message with tool calls, in p's wire format. */
static int add_assistant_calls(const struct provider *p,
                               const struct orch_model_msg *m,
                               struct orch_toolnames *tn, cJSON *mo)
{
    cJSON *calls = NULL;
    if (fo_json_parse(m->tool_calls, strlen(m->tool_calls), &calls, NULL))
        return FO_E_NOMEM; /* checked before: only memory can fail */
    int rc = FO_E_NOMEM;
    const cJSON *c;
    if (p->api == ORCH_EXEC_CHAT) {
        cJSON *arr = cJSON_AddArrayToObject(mo, "tool_calls");
        if (!arr || !cJSON_AddStringToObject(mo, "content", m->content))
            goto out;
        cJSON_ArrayForEach (c, calls) {
            cJSON *w = cJSON_CreateObject(), *f;
            if (!w)
                goto out;
            cJSON_AddItemToArray(arr, w);
            f = cJSON_AddObjectToObject(w, "function");
            if (!f ||
                !cJSON_AddStringToObject(
                    w, "id", cJSON_GetObjectItem(c, "id")->valuestring) ||
                !cJSON_AddStringToObject(w, "type", "function") ||
                !cJSON_AddStringToObject(
                    f, "name",
                    orch_toolnames_wire(
                        tn, cJSON_GetObjectItem(c, "name")->valuestring)) ||
                !cJSON_AddStringToObject(
                    f, "arguments",
                    cJSON_GetObjectItem(c, "arguments")->valuestring))
                goto out;
        }
    } else {
        cJSON *arr = cJSON_AddArrayToObject(mo, "content");
        if (!arr)
            goto out;
        if (m->content[0]) {
            cJSON *t = cJSON_CreateObject();
            if (!t)
                goto out;
            cJSON_AddItemToArray(arr, t);
            if (!cJSON_AddStringToObject(t, "type", "text") ||
                !cJSON_AddStringToObject(t, "text", m->content))
                goto out;
        }
        cJSON_ArrayForEach (c, calls) {
            const char *args = cJSON_GetObjectItem(c, "arguments")->valuestring;
            cJSON *in = NULL;
            /* arguments that do not parse to an object were answered with
             * an error: what the model meant cannot be shown, so {} */
            if (fo_json_parse(args, strlen(args), &in, NULL) != FO_OK ||
                !cJSON_IsObject(in)) {
                cJSON_Delete(in);
                in = cJSON_CreateObject();
            }
            cJSON *w = cJSON_CreateObject();
            if (!w || !in) {
                cJSON_Delete(w);
                cJSON_Delete(in);
                goto out;
            }
            cJSON_AddItemToArray(arr, w);
            if (!cJSON_AddStringToObject(w, "type", "tool_use") ||
                !cJSON_AddStringToObject(
                    w, "id", cJSON_GetObjectItem(c, "id")->valuestring) ||
                !cJSON_AddStringToObject(
                    w, "name",
                    orch_toolnames_wire(
                        tn, cJSON_GetObjectItem(c, "name")->valuestring)) ||
                !cJSON_AddItemToObject(w, "input", in))
                goto out;
        }
    }
    rc = FO_OK;
out:
    cJSON_Delete(calls);
    return rc;
}

/* The request body for p; msgs have passed msgs_check, tools tools_check. */
static int build_body(const struct provider *p, const char *tools,
                      const struct orch_model_msg *msgs, size_t n,
                      struct fo_buf *out, struct fo_err *err)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "messages") : NULL;
    cJSON *results = NULL; /* anthropic: the tool_result blocks being
                              gathered into one user message */
    struct fo_buf sys;
    fo_buf_init(&sys, FO_BUF_UNLIMITED);
    int rc = FO_E_NOMEM;
    struct orch_toolnames *tn = NULL;
    if (!arr || !cJSON_AddStringToObject(o, "model", p->model) ||
        orch_toolnames_make(tools, &tn))
        goto out;
    if (p->api == ORCH_EXEC_ANTHROPIC &&
        !fo_json_add_int(o, "max_tokens", p->max_tokens))
        goto out;
    for (size_t i = 0; i < n; i++) {
        const char *role = msgs[i].role, *c = msgs[i].content;
        int tool = strcmp(role, "tool") == 0;
        if (p->api == ORCH_EXEC_ANTHROPIC && strcmp(role, "system") == 0) {
            if ((sys.len && fo_buf_puts(&sys, "\n\n")) || fo_buf_puts(&sys, c))
                goto out;
            continue;
        }
        if (!tool)
            results = NULL;
        if (tool && p->api == ORCH_EXEC_ANTHROPIC) {
            if (!results) {
                cJSON *mo = cJSON_CreateObject();
                if (!mo)
                    goto out;
                cJSON_AddItemToArray(arr, mo);
                if (!cJSON_AddStringToObject(mo, "role", "user") ||
                    !(results = cJSON_AddArrayToObject(mo, "content")))
                    goto out;
            }
            cJSON *b = cJSON_CreateObject();
            if (!b)
                goto out;
            cJSON_AddItemToArray(results, b);
            if (!cJSON_AddStringToObject(b, "type", "tool_result") ||
                !cJSON_AddStringToObject(b, "tool_use_id",
                                         msgs[i].tool_call_id) ||
                !cJSON_AddStringToObject(b, "content", c) ||
                (msgs[i].is_error && !cJSON_AddTrueToObject(b, "is_error")))
                goto out;
            continue;
        }
        cJSON *mo = cJSON_CreateObject();
        if (!mo)
            goto out;
        cJSON_AddItemToArray(arr, mo);
        if (!cJSON_AddStringToObject(mo, "role", role))
            goto out;
        if (msgs[i].tool_calls) {
            if (add_assistant_calls(p, &msgs[i], tn, mo))
                goto out;
            continue;
        }
        if (!cJSON_AddStringToObject(mo, "content", c) ||
            (tool && !cJSON_AddStringToObject(mo, "tool_call_id",
                                              msgs[i].tool_call_id)))
            goto out;
    }
    if (sys.len && !cJSON_AddStringToObject(o, "system", sys.data))
        goto out;
    if (add_tools(p, tools, tn, o))
        goto out;
    rc = fo_json_canon(o, out, err);
out:
    if (rc == FO_E_NOMEM)
        fo_err_set(err, rc, NULL);
    cJSON_Delete(o);
    fo_buf_release(&sys);
    orch_toolnames_free(tn);
    return rc;
}

/* The shortest piece of a key that scrub() still removes where a cut has left
 * only the start of the key at the end of a string. */
#define SCRUB_PREFIX_MIN 8

/* Replaces every copy of key in s by "[redacted]" (in place, s NUL-ended
 * within size), then any start of the key of SCRUB_PREFIX_MIN or more bytes
 * that ends the string (what is left of a key that a cut went through). */
static void scrub(char *s, size_t size, const char *key)
{
    size_t kl = key ? strlen(key) : 0;
    if (kl == 0)
        return;
    static const char red[] = "[redacted]";
    size_t rl = sizeof(red) - 1;
    char *hit;
    while ((hit = strstr(s, key)) != NULL) {
        size_t tail = strlen(hit + kl);
        size_t pos = (size_t)(hit - s);
        if (pos + rl + tail + 1 > size)
            tail = size > pos + rl + 1 ? size - pos - rl - 1 : 0;
        if (pos + rl + 1 > size) {
            s[pos] = '\0';
            return;
        }
        memmove(hit + rl, hit + kl, tail);
        memcpy(hit, red, rl);
        hit[rl + tail] = '\0';
    }
    size_t n = strlen(s);
    for (size_t p = kl - 1; p >= SCRUB_PREFIX_MIN && p < kl; p--) {
        if (p > n || memcmp(s + n - p, key, p) != 0)
            continue;
        size_t pos = n - p;
        if (pos + rl + 1 <= size)
            memcpy(s + pos, red, rl + 1);
        else
            s[pos] = '\0';
        return;
    }
}

/* The "error.message" (or "error" string, or "message") of an error body,
 * with key scrubbed from it and then cut to SNIPPET_MAX bytes, into out; ""
 * when there is none. Scrubbing comes first so that a cut cannot leave part
 * of a key that scrub() no longer recognises. */
static void error_snippet(const struct fo_buf *body, const char *key, char *out,
                          size_t size)
{
    cJSON *j = NULL;
    out[0] = '\0';
    if (!body->len || fo_json_parse(body->data, body->len, &j, NULL))
        return;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    const cJSON *msg =
        cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "message") : e;
    if (!cJSON_IsString(msg))
        msg = cJSON_GetObjectItemCaseSensitive(j, "message");
    if (cJSON_IsString(msg)) {
        /* room for every copy of a short key to grow into "[redacted]" */
        size_t len = strlen(msg->valuestring);
        size_t room = len + (len + 1) * 10 + 1;
        char *s = malloc(room);
        if (s) {
            memcpy(s, msg->valuestring, len + 1);
            scrub(s, room, key);
            size_t n = orch_utf8_prefix(
                s, strlen(s), size - 1 < SNIPPET_MAX ? size - 1 : SNIPPET_MAX);
            memcpy(out, s, n);
            out[n] = '\0';
            for (size_t i = 0; i < n; i++)
                if ((unsigned char)out[i] < 0x20)
                    out[i] = ' ';
            free(s);
        }
    }
    cJSON_Delete(j);
}

/* Adds {id, name, arguments} to calls: arguments as the model wrote them
 * (a string), or an object's canonical JSON text. */
static int add_call(cJSON *calls, const char *id, const char *name,
                    const cJSON *args, const struct orch_toolnames *tn)
{
    name = orch_toolnames_name(tn, name); /* the roster's name */
    char *text = NULL;
    if (!cJSON_IsString(args)) {
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        if (fo_json_canon(args, &b, NULL) ||
            !(text = fo_buf_detach(&b, NULL))) {
            fo_buf_release(&b);
            return FO_E_NOMEM;
        }
    }
    cJSON *c = cJSON_CreateObject();
    int ok = c && cJSON_AddStringToObject(c, "id", id) &&
             cJSON_AddStringToObject(c, "name", name) &&
             cJSON_AddStringToObject(c, "arguments",
                                     text ? text : args->valuestring);
    free(text);
    if (c)
        cJSON_AddItemToArray(calls, c);
    return ok ? FO_OK : FO_E_NOMEM;
}

/* A token count of a usage object: a whole number 0..2^40, else -1. */
static int64_t usage_count(const cJSON *usage, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(usage, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 ||
        v->valuedouble > 1099511627776.0 ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
        return -1;
    return (int64_t)v->valuedouble;
}

/* An Anthropic Messages answer's content: its text parts into text, its
 * tool_use parts into calls. FO_OK, FO_E_UPSTREAM or FO_E_NOMEM (err set). */
static int parse_anthropic(const struct provider *p, const cJSON *j,
                           const struct orch_toolnames *tn, cJSON *calls,
                           struct fo_buf *text, struct fo_err *err)
{
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(j, "content");
    const cJSON *part;
    int texts = 0;
    if (!cJSON_IsArray(content)) {
        fo_err_set(err, FO_E_UPSTREAM,
                   "provider %s: the answer has no content list", p->name);
        return FO_E_UPSTREAM;
    }
    cJSON_ArrayForEach (part, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (cJSON_IsString(type) &&
            strcmp(type->valuestring, "tool_use") == 0) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(part, "id");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(part, "name");
            const cJSON *in = cJSON_GetObjectItemCaseSensitive(part, "input");
            if (!cJSON_IsString(id) || !cJSON_IsString(name) || !in) {
                fo_err_set(err, FO_E_UPSTREAM,
                           "provider %s: a tool_use part of the answer "
                           "has no id, name or input",
                           p->name);
                return FO_E_UPSTREAM;
            }
            if (add_call(calls, id->valuestring, name->valuestring, in, tn))
                return fo_err_set(err, FO_E_NOMEM, NULL);
            continue;
        }
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text"))
            continue;
        if (!cJSON_IsString(t)) {
            fo_err_set(err, FO_E_UPSTREAM,
                       "provider %s: a text part of the answer has no "
                       "text string",
                       p->name);
            return FO_E_UPSTREAM;
        }
        texts++;
        if (fo_buf_puts(text, t->valuestring))
            return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    if (!texts && cJSON_GetArraySize(calls) == 0) {
        fo_err_set(err, FO_E_UPSTREAM,
                   "provider %s: the answer has no text part", p->name);
        return FO_E_UPSTREAM;
    }
    return FO_OK;
}

static int parse_answer(const struct provider *p, const struct fo_buf *body,
                        const struct orch_toolnames *tn,
                        struct orch_model_reply *out, struct fo_err *err)
{
    cJSON *j = NULL, *calls = NULL;
    struct fo_buf text;
    fo_buf_init(&text, FO_BUF_UNLIMITED);
    struct fo_err perr;
    int rc = fo_json_parse(body->data ? body->data : "", body->len, &j, &perr);
    if (rc == FO_E_NOMEM) {
        fo_err_set(err, rc, NULL);
        goto out;
    }
    rc = FO_E_UPSTREAM;
    if (!j) {
        fo_err_set(err, rc, "provider %s: the answer is not JSON: %s", p->name,
                   perr.msg);
        goto out;
    }
    if (!cJSON_IsObject(j)) {
        fo_err_set(err, rc, "provider %s: the answer is not a JSON object",
                   p->name);
        goto out;
    }
    calls = cJSON_CreateArray();
    if (!calls)
        goto nomem;
    if (p->api == ORCH_EXEC_CHAT) {
        const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "choices");
        const cJSON *c0 = cJSON_IsArray(ch) ? cJSON_GetArrayItem(ch, 0) : NULL;
        const cJSON *msg =
            c0 ? cJSON_GetObjectItemCaseSensitive(c0, "message") : NULL;
        const cJSON *content =
            msg ? cJSON_GetObjectItemCaseSensitive(msg, "content") : NULL;
        const cJSON *tc =
            msg ? cJSON_GetObjectItemCaseSensitive(msg, "tool_calls") : NULL;
        const cJSON *one;
        if (!cJSON_IsArray(tc))
            tc = NULL;
        cJSON_ArrayForEach (one, tc) {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(one, "function");
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(one, "id");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
            const cJSON *args =
                cJSON_GetObjectItemCaseSensitive(f, "arguments");
            if (!cJSON_IsString(id) || !cJSON_IsString(name) ||
                !(cJSON_IsString(args) || cJSON_IsObject(args))) {
                fo_err_set(err, rc,
                           "provider %s: a tool call of the answer has no "
                           "id, function.name or function.arguments",
                           p->name);
                goto out;
            }
            if (add_call(calls, id->valuestring, name->valuestring, args, tn))
                goto nomem;
        }
        if (!cJSON_IsString(content) &&
            !(cJSON_GetArraySize(calls) > 0 &&
              (!content || cJSON_IsNull(content)))) {
            fo_err_set(err, rc,
                       "provider %s: the answer has no "
                       "choices[0].message.content string",
                       p->name);
            goto out;
        }
        if (cJSON_IsString(content) && fo_buf_puts(&text, content->valuestring))
            goto nomem;
    } else {
        int r = parse_anthropic(p, j, tn, calls, &text, err);
        if (r == FO_E_NOMEM)
            goto nomem;
        if (r)
            goto out;
    }
    if (cJSON_GetArraySize(calls) > 0) {
        struct fo_buf cb;
        fo_buf_init(&cb, FO_BUF_UNLIMITED);
        if (fo_json_canon(calls, &cb, NULL) ||
            !(out->tool_calls = fo_buf_detach(&cb, NULL))) {
            fo_buf_release(&cb);
            goto nomem;
        }
    }
    /* token counts as the server reports them (chat: prompt_tokens and
     * completion_tokens; Anthropic: input_tokens and output_tokens); -1
     * when absent or not a count */
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
    int chat = p->api == ORCH_EXEC_CHAT;
    out->tokens_in =
        usage_count(usage, chat ? "prompt_tokens" : "input_tokens");
    out->tokens_out =
        usage_count(usage, chat ? "completion_tokens" : "output_tokens");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (cJSON_IsString(model) &&
        orch_name_valid(model->valuestring, ORCH_MODEL_MAX))
        snprintf(out->model, sizeof(out->model), "%s", model->valuestring);
    out->text = fo_buf_detach(&text, &out->text_len);
    if (!out->text)
        goto nomem;
    rc = FO_OK;
    goto out;
nomem:
    rc = fo_err_set(err, FO_E_NOMEM, NULL);
out:
    if (rc) {
        free(out->tool_calls);
        out->tool_calls = NULL;
    }
    cJSON_Delete(j);
    cJSON_Delete(calls);
    fo_buf_release(&text);
    return rc;
}

/* ---- one call in flight -------------------------------------------------- */

void orch_model_reply_release(struct orch_model_reply *r)
{
    if (!r)
        return;
    free(r->text);
    r->text = NULL;
    r->text_len = 0;
    free(r->tool_calls);
    r->tool_calls = NULL;
}

/* What a call's step timer does when it fires: the phases never overlap,
 * so one event serves them all. */
enum {
    PH_KICK,    /* ask the first provider (queued by the start) */
    PH_BACKOFF, /* the wait before the next attempt is over */
};

/* One request (httpc) and what came back. */
struct attempt {
    struct httpc_req *req; /* in flight; NULL once it ended */
    int64_t budget_ms;     /* what was left of the deadline at the start */
    int status;
    int retry_after;
    struct fo_buf body;
};

struct orch_model_call {
    const struct orch_model *m;
    struct event_base *base;
    struct evdns_base *dns;
    orch_model_done_fn done;
    void *arg;
    struct event *step; /* the timer of the PH_ phases */
    int phase;
    int finishing; /* done is running: cancel does nothing */
    int64_t start_us, deadline_us;
    unsigned char cand[ORCH_MODEL_PROVIDERS_MAX]; /* providers, in order */
    size_t n_cand, next_cand;
    /* one block; kept only while a later candidate needs a body built */
    struct orch_model_msg *msgs;
    size_t n_msgs;
    char *tools;              /* offered to the model; NULL: none */
    const struct provider *p; /* the provider being asked */
    /* its API key: the environment's own string, never copied (glibc never
     * frees one, even when the variable is set again) */
    const char *key;
    struct fo_buf req_body; /* the JSON body for p, sent by each attempt */
    int k;                  /* requests made to p */
    int64_t delay;          /* the next backoff, ms */
    struct attempt a;
    struct orch_model_reply rep;
    struct fo_err err;
};

static struct timeval tv_ms(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000),
                         .tv_usec = (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

static void attempt_begin(struct orch_model_call *c);
static void attempt_judge(struct orch_model_call *c, int rc, int retriable);
static void next_provider(struct orch_model_call *c);

static void attempt_release(struct attempt *a)
{
    httpc_req_cancel(a->req); /* NULL-safe */
    fo_buf_release(&a->body);
    *a = (struct attempt){0};
}

static void call_free(struct orch_model_call *c)
{
    attempt_release(&c->a);
    if (c->step)
        event_free(c->step);
    free(c->msgs);
    free(c->tools);
    fo_buf_release(&c->req_body);
    orch_model_reply_release(&c->rep);
    free(c);
}

/* The call is over: done, then the call is freed. Only ever reached from
 * the call's own timer or the end of its request (httpc's own event), so
 * no libevent callback of a connection is on the stack. */
static void finish(struct orch_model_call *c, int rc)
{
    c->rep.elapsed_us = ledger_mono_us() - c->start_us;
    c->finishing = 1;
    c->done(c->arg, rc, &c->rep, &c->err);
    call_free(c);
}

/* The provider c->p ended with rc. The call ends too unless fallover moves
 * on to the next candidate. */
static void provider_end(struct orch_model_call *c, int rc, int give_up)
{
    scrub(c->err.msg, sizeof(c->err.msg), c->key);
    c->key = NULL;
    fo_buf_release(&c->req_body);
    if (rc == FO_OK || give_up || !c->m->fallover ||
        c->next_cand >= c->n_cand) {
        finish(c, rc);
        return;
    }
    next_provider(c);
}

static void on_step(evutil_socket_t fd, short what, void *arg)
{
    struct orch_model_call *c = arg;
    (void)fd;
    (void)what;
    if (c->phase == PH_KICK)
        next_provider(c);
    else
        attempt_begin(c);
}

/* The attempt's request ended: what came, classified. */
static void on_http(void *arg, struct httpc_result *res)
{
    struct orch_model_call *c = arg;
    const struct provider *p = c->p;
    struct attempt *a = &c->a;
    struct fo_err *err = &c->err;
    a->req = NULL; /* httpc frees it when this returns */
    int retriable = 0, rc = FO_OK;
    switch (res->end) {
    case HTTPC_END_OK:
        break;
    case HTTPC_END_TIMEOUT:
        rc = fo_err_set(err, FO_E_TIMEOUT,
                        "provider %s: no answer within the %lld ms deadline",
                        p->name, (long long)a->budget_ms);
        retriable = 1;
        break;
    default:
        rc = fo_err_set(err, res->err.code, "provider %s: %s", p->name,
                        res->err.msg);
        retriable = res->end == HTTPC_END_DNS ||
                    res->end == HTTPC_END_CONNECT ||
                    res->end == HTTPC_END_CONNECT_TIMEOUT ||
                    res->end == HTTPC_END_CLOSED;
        break;
    }
    if (rc == FO_OK) {
        a->status = res->status;
        size_t n = evbuffer_get_length(res->body);
        const char *data =
            n ? (const char *)evbuffer_pullup(res->body, -1) : NULL;
        if (n && (!data || fo_buf_append(&a->body, data, n) != FO_OK))
            rc = fo_err_set(err, FO_E_UPSTREAM,
                            "provider %s: response over the %zu-byte cap",
                            p->name, c->m->response_max);
        const char *ra = evhttp_find_header(res->headers, "Retry-After");
        if (ra) {
            char *end;
            errno = 0;
            long long v = strtoll(ra, &end, 10);
            if (!errno && end != ra && *end == '\0' && v >= 0 &&
                v <= RETRY_AFTER_MAX)
                a->retry_after = (int)v;
        }
    }
    attempt_judge(c, rc, retriable);
}

/* One request to c->p, while the deadline allows it. */
static void attempt_begin(struct orch_model_call *c)
{
    const struct provider *p = c->p;
    struct attempt *a = &c->a;
    c->k++;
    int64_t left = (c->deadline_us - ledger_mono_us()) / 1000;
    if (left <= 0) {
        int rc = fo_err_set(&c->err, FO_E_TIMEOUT,
                            "provider %s: the deadline passed", p->name);
        c->rep.retriable = 1;
        provider_end(c, rc, 1);
        return;
    }
    *a = (struct attempt){.budget_ms = left};
    fo_buf_init(&a->body, c->m->response_max);
    c->rep.attempts++;
    struct httpc_header h[4] = {{"Content-Type", "application/json"},
                                {"Accept", "application/json"}};
    size_t nh = 2;
    struct fo_buf auth;
    fo_buf_init(&auth, 16 * 1024);
    int rc = FO_OK;
    if (p->api == ORCH_EXEC_ANTHROPIC) {
        h[nh++] = (struct httpc_header){"anthropic-version", ANTHROPIC_VERSION};
        if (c->key)
            h[nh++] = (struct httpc_header){"x-api-key", c->key};
    } else if (c->key) {
        rc = fo_buf_printf(&auth, "Bearer %s", c->key);
        h[nh++] = (struct httpc_header){"Authorization", auth.data};
    }
    struct httpc_spec spec = {.method = HTTPC_POST,
                              .url = &p->url,
                              .headers = h,
                              .n_headers = nh,
                              .body = c->req_body.data,
                              .body_len = c->req_body.len,
                              .tls = c->m->tls,
                              .pool = c->base == c->m->pool_base ? c->m->pool
                                                                 : NULL,
                              .dns = c->dns,
                              .connect_ms = c->m->connect_ms,
                              .timeout_ms = (int)left,
                              .body_max = c->m->response_max,
                              .done = on_http,
                              .arg = c};
    if (!rc)
        rc = httpc_req_start(c->base, &spec, &a->req, &c->err);
    if (auth.data) /* the key leaves no copy of ours behind */
        memset(auth.data, 0, auth.len);
    fo_buf_release(&auth);
    if (rc) {
        fo_err_prefix(&c->err, "provider %s", p->name);
        attempt_judge(c, rc, 0);
    }
}

/* Reads the outcome of the attempt that ended (rc and retriable, with
 * c->err, when no response came): the answer, a retry after the backoff,
 * the next provider or the end of the call. */
static void attempt_judge(struct orch_model_call *c, int rc, int retriable)
{
    const struct orch_model *m = c->m;
    const struct provider *p = c->p;
    struct attempt *a = &c->a;
    struct fo_err *err = &c->err;
    c->rep.http_status = a->status;
    if (rc == FO_OK) {
        if (a->status >= 200 && a->status < 300) {
            struct orch_toolnames *tn = NULL;
            rc = orch_toolnames_make(c->tools, &tn)
                     ? fo_err_set(err, FO_E_NOMEM, NULL)
                     : parse_answer(p, &a->body, tn, &c->rep, err);
            orch_toolnames_free(tn);
        } else {
            char snip[SNIPPET_MAX + 1];
            error_snippet(&a->body, c->key, snip, sizeof(snip));
            retriable = a->status == 429 || a->status >= 500;
            rc = fo_err_set(err, retriable ? FO_E_UNAVAILABLE : FO_E_UPSTREAM,
                            "provider %s: HTTP %d%s%s%s", p->name, a->status,
                            a->status == 401 || a->status == 403
                                ? " (check the API key)"
                                : "",
                            snip[0] ? ": " : "", snip);
        }
    }
    int retry_after = a->retry_after;
    attempt_release(a);
    c->rep.retriable = retriable;
    if (rc == FO_OK || !retriable) {
        provider_end(c, rc, 1);
        return;
    }
    scrub(err->msg, sizeof(err->msg), c->key);
    if (c->k >= m->attempts) {
        if (rc != FO_E_TIMEOUT)
            fo_err_prefix(err, "%d attempts failed", c->k);
        provider_end(c, rc, rc == FO_E_TIMEOUT);
        return;
    }
    int64_t wait = c->delay;
    if (retry_after > 0 && (int64_t)retry_after * 1000 > wait &&
        (int64_t)retry_after * 1000 <= m->backoff_max_ms)
        wait = (int64_t)retry_after * 1000;
    if (ledger_mono_us() + wait * 1000 >= c->deadline_us) {
        rc = fo_err_set(err, FO_E_TIMEOUT,
                        "provider %s: the deadline leaves no room for "
                        "attempt %d",
                        p->name, c->k + 1);
        provider_end(c, rc, 1);
        return;
    }
    c->delay =
        c->delay * 2 > m->backoff_max_ms ? m->backoff_max_ms : c->delay * 2;
    struct timeval tv = tv_ms(wait);
    c->phase = PH_BACKOFF;
    /* from now, not from the loop's cached time of this turn (which may be
     * a millisecond old: the wait would come out short) */
    event_base_update_cache_time(c->base);
    if (evtimer_add(c->step, &tv) != 0) {
        rc = fo_err_set(err, FO_E_NOMEM, "provider %s: cannot set a timer",
                        p->name);
        provider_end(c, rc, 1);
    }
}

/* Moves to the next candidate: its key, its body, its first attempt. */
static void next_provider(struct orch_model_call *c)
{
    const struct provider *p = &c->m->p[c->cand[c->next_cand]];
    int first = c->next_cand == 0;
    int rc;
    c->next_cand++;
    c->p = p;
    snprintf(c->rep.model, sizeof(c->rep.model), "%s", p->model);
    snprintf(c->rep.provider, sizeof(c->rep.provider), "%s", p->name);
    c->rep.api = p->api;
    if (p->key_env) {
        const char *key = secure_getenv(p->key_env);
        if (!key || !*key) {
            rc = fo_err_set(&c->err, FO_E_INVALID,
                            "provider %s: the API key variable %s is not set",
                            p->name, p->key_env);
            provider_end(c, rc, 1);
            return;
        }
        c->key = key;
    }
    if (!first) { /* the start built the first body */
        rc = build_body(p, c->tools, c->msgs, c->n_msgs, &c->req_body, &c->err);
        if (c->next_cand >= c->n_cand) { /* no later body to build */
            free(c->msgs);
            c->msgs = NULL;
        }
        if (rc) {
            provider_end(c, rc, 1);
            return;
        }
    }
    c->k = 0;
    c->delay = c->m->backoff_ms;
    attempt_begin(c);
}

/* The providers a call asks, in order (see orch_model_call): those of the
 * tier, then those of every tier; only the first without fallover. */
static size_t candidates(const struct orch_model *m, int api, int tier,
                         unsigned char *cand)
{
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < m->n; i++) {
            const struct provider *p = &m->p[i];
            if (api != ORCH_EXEC_DEFAULT && p->api != api)
                continue;
            if (pass == 0 ? p->tier != tier || tier == ORCH_TIER_ANY
                          : p->tier != ORCH_TIER_ANY)
                continue;
            cand[n++] = (unsigned char)i;
        }
    }
    return m->fallover || n == 0 ? n : 1;
}

static size_t opt_len(const char *s)
{
    return s ? strlen(s) + 1 : 0;
}

static const char *opt_copy(char **s, const char *from)
{
    if (!from)
        return NULL;
    size_t n = strlen(from) + 1;
    char *at = *s;
    memcpy(at, from, n);
    *s += n;
    return at;
}

/* msgs and their strings in one block. */
static struct orch_model_msg *msgs_copy(const struct orch_model_msg *msgs,
                                        size_t n)
{
    size_t size = n * sizeof(*msgs);
    for (size_t i = 0; i < n; i++)
        size += opt_len(msgs[i].role) + opt_len(msgs[i].content) +
                opt_len(msgs[i].tool_calls) + opt_len(msgs[i].tool_call_id);
    struct orch_model_msg *cp = malloc(size);
    if (!cp)
        return NULL;
    char *s = (char *)(cp + n);
    for (size_t i = 0; i < n; i++) {
        cp[i].role = opt_copy(&s, msgs[i].role);
        cp[i].content = opt_copy(&s, msgs[i].content);
        cp[i].tool_calls = opt_copy(&s, msgs[i].tool_calls);
        cp[i].tool_call_id = opt_copy(&s, msgs[i].tool_call_id);
        cp[i].is_error = msgs[i].is_error;
    }
    return cp;
}

int orch_model_call_start(const struct orch_model *m, struct event_base *base,
                          struct evdns_base *dns, int api, int tier,
                          const struct orch_model_msg *msgs, size_t n_msgs,
                          orch_model_done_fn done, void *arg,
                          struct orch_model_call **out, struct fo_err *err)
{
    return orch_model_call_tools_start(m, base, dns, api, tier, NULL, msgs,
                                       n_msgs, done, arg, out, err);
}

int orch_model_call_tools_start(const struct orch_model *m,
                                struct event_base *base, struct evdns_base *dns,
                                int api, int tier, const char *tools,
                                const struct orch_model_msg *msgs,
                                size_t n_msgs, orch_model_done_fn done,
                                void *arg, struct orch_model_call **out,
                                struct fo_err *err)
{
    struct orch_model_call *c = NULL;
    int rc = FO_E_INVALID;
    if (!m || !base || !done) {
        fo_err_set(err, rc, "model call: no client, event base or callback");
        goto out;
    }
    if (n_msgs == 0 || !msgs) {
        fo_err_set(err, rc, "model call: no messages");
        goto out;
    }
    rc = tools_check(tools, err);
    if (rc)
        goto out;
    rc = FO_E_INVALID;
    c = calloc(1, sizeof(*c));
    if (!c)
        goto nomem;
    fo_buf_init(&c->req_body, FO_BUF_UNLIMITED);
    c->n_cand = candidates(m, api, tier, c->cand);
    if (!c->n_cand) {
        fo_err_set(err, rc, "no %s provider for tier %s",
                   api == ORCH_EXEC_DEFAULT ? "model" : orch_exec_name(api),
                   tier == ORCH_TIER_ANY ? "any" : orch_tier_name(tier));
        goto out;
    }
    rc = msgs_check(msgs, n_msgs, err);
    if (rc)
        goto out;
    for (size_t i = 0; i < c->n_cand; i++) {
        const struct provider *p = &m->p[c->cand[i]];
        if (!p->url.addr && !dns) {
            rc = fo_err_set(err, FO_E_INVALID,
                            "provider %s: host %s needs a resolver (dns)",
                            p->name, p->url.host);
            goto out;
        }
    }
    rc = build_body(&m->p[c->cand[0]], tools, msgs, n_msgs, &c->req_body, err);
    if (rc)
        goto out;
    /* the tools map the answer's names back (orch_toolnames) */
    if ((tools && !(c->tools = orch_strdup(tools))) ||
        (c->n_cand > 1 && !(c->msgs = msgs_copy(msgs, n_msgs))))
        goto nomem;
    if (c->n_cand > 1)
        c->n_msgs = n_msgs;
    c->m = m;
    c->base = base;
    c->dns = dns;
    c->done = done;
    c->arg = arg;
    fo_err_clear(&c->err);
    c->start_us = ledger_mono_us();
    c->deadline_us = c->start_us + (int64_t)m->timeout_ms * 1000;
    c->step = evtimer_new(base, on_step, c);
    if (!c->step)
        goto nomem;
    c->phase = PH_KICK; /* the first provider is asked from the loop */
    event_active(c->step, EV_TIMEOUT, 1);
    if (out)
        *out = c;
    c = NULL;
    rc = FO_OK;
    goto out;
nomem:
    rc = fo_err_set(err, FO_E_NOMEM, NULL);
out:
    if (c)
        call_free(c);
    return rc;
}

void orch_model_call_cancel(struct orch_model_call *c)
{
    if (!c || c->finishing)
        return;
    call_free(c);
}

int orch_model_dns_create(struct event_base *base, struct evdns_base **out,
                          struct fo_err *err)
{
    return httpc_dns_create(base, out, err);
}

/* ---- the blocking call --------------------------------------------------- */

struct sync_call {
    struct orch_model_reply *out;
    struct fo_err *err;
    int rc;
    int done;
};

static void sync_done(void *arg, int rc, struct orch_model_reply *rep,
                      const struct fo_err *err)
{
    struct sync_call *s = arg;
    *s->out = *rep;
    rep->text = NULL; /* handed over to out */
    rep->tool_calls = NULL;
    if (s->err)
        *s->err = *err;
    s->rc = rc;
    s->done = 1;
}

/* Whether a call may need a host name looked up. */
static int needs_dns(const struct orch_model *m, int api, int tier)
{
    unsigned char cand[ORCH_MODEL_PROVIDERS_MAX];
    size_t n = candidates(m, api, tier, cand);
    for (size_t i = 0; i < n; i++)
        if (!m->p[cand[i]].url.addr)
            return 1;
    return 0;
}

int orch_model_call(const struct orch_model *m, int api, int tier,
                    const struct orch_model_msg *msgs, size_t n_msgs,
                    struct orch_model_reply *out, struct fo_err *err)
{
    int64_t start = ledger_mono_us();
    struct event_base *base = NULL;
    struct evdns_base *dns = NULL;
    struct orch_model_call *c = NULL;
    struct sync_call s = {.out = out, .err = err};
    *out = (struct orch_model_reply){0};
    int rc = FO_E_NOMEM;
    base = event_base_new();
    if (!base) {
        fo_err_set(err, rc, "model call: cannot create an event base");
        goto out;
    }
    if (needs_dns(m, api, tier)) {
        rc = httpc_dns_create(base, &dns, err);
        if (rc)
            goto out;
    }
    rc = orch_model_call_start(m, base, dns, api, tier, msgs, n_msgs, sync_done,
                               &s, &c, err);
    if (rc)
        goto out;
    while (!s.done)
        if (event_base_loop(base, EVLOOP_ONCE) != 0)
            break;
    if (!s.done) { /* cannot happen: the call always holds a timer */
        orch_model_call_cancel(c);
        rc = fo_err_set(err, FO_E_INTERNAL, "model call: the loop stopped");
        goto out;
    }
    rc = s.rc;
    /* evdns answers cancelled lookups from the loop; let it, so that
     * nothing is left for event_base_free to drop */
    for (int i = 0;
         i < 8 && event_base_get_num_events(base, EVENT_BASE_COUNT_ACTIVE) > 0;
         i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
out:
    if (!s.done)
        out->elapsed_us = ledger_mono_us() - start;
    if (dns)
        evdns_base_free(dns, 0);
    if (base)
        event_base_free(base);
    return rc;
}

/* ---- one provider alone (forum doctor) --------------------------------- */

void orch_model_forge(const struct orch_model *m, int api, int tier,
                      const char *provider, struct orch_forge *out)
{
    *out = (struct orch_forge){
        .rescue = 1, .malformed_retries = ORCH_MALFORMED_RETRIES_DEFAULT};
    const struct provider *hit = NULL;
    for (size_t i = 0; m && provider && !hit && i < m->n; i++)
        if (!strcmp(m->p[i].name, provider))
            hit = &m->p[i];
    /* as the call picks them: the tier's own, then the "any" ones */
    for (int pass = 0; m && !hit && pass < 2; pass++)
        for (size_t i = 0; !hit && i < m->n; i++) {
            const struct provider *p = &m->p[i];
            if (api != ORCH_EXEC_DEFAULT && p->api != api)
                continue;
            if (pass == 0 ? p->tier != tier || tier == ORCH_TIER_ANY
                          : p->tier != ORCH_TIER_ANY)
                continue;
            hit = p;
        }
    if (hit)
        *out = hit->forge;
}

size_t orch_model_providers(const struct orch_model *m)
{
    return m ? m->n : 0;
}

int orch_model_provider_url(const struct orch_model *m, size_t i, char *url,
                            size_t cap)
{
    if (!m || i >= m->n)
        return FO_E_NOT_FOUND;
    const struct provider *p = &m->p[i];
    httpc_url_text(&p->url, NULL, url, cap);
    return FO_OK;
}

int orch_model_probe(const struct orch_model *m, size_t i, int timeout_ms,
                     struct orch_model_reply *out, struct fo_err *err)
{
    if (!m || i >= m->n)
        return fo_err_set(err, FO_E_NOT_FOUND, "provider %zu: none", i);
    /* a copy of the client that knows provider i alone, asked once */
    struct orch_model one = *m;
    one.p = &m->p[i];
    one.n = 1;
    one.attempts = 1;
    one.fallover = 0;
    if (timeout_ms > 0)
        one.timeout_ms = timeout_ms;
    int tier = m->p[i].tier == ORCH_TIER_ANY ? ORCH_TIER_CHEAP : m->p[i].tier;
    const struct orch_model_msg msg = {.role = "user",
                                       .content = "Reply with the word ok."};
    return orch_model_call(&one, m->p[i].api, tier, &msg, 1, out, err);
}
