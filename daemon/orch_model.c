/* orch_model: the chat (OpenAI-compatible) and Anthropic model executors
 * on libevent's HTTP client. A call is a small state machine on a caller's
 * event_base (thousands in flight on one thread): host names looked up with
 * evdns, TLS verified through libevent_openssl, our own connect, backoff and
 * deadline timers, a response cap, classified errors. The blocking call runs
 * one on a private base. */
#include "daemon/orch_model.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "daemon/orch_int.h"
#include "ledger/fo_json.h"

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
    int tls;
    char *host; /* without brackets */
    char *addr; /* what to connect to when host needs no lookup (an IP
                   literal, or 127.0.0.1 for localhost); NULL for a name */
    int port;
    char *path; /* with the query, if any */
    char *host_header;
};

struct orch_model {
    struct provider *p;
    size_t n;
    int connect_ms, timeout_ms, attempts, backoff_ms, backoff_max_ms;
    int fallover;
    size_t response_max;
    SSL_CTX *ssl; /* NULL when no provider uses https */
};

/* ---- configuration ------------------------------------------------------ */

static void provider_release(struct provider *p)
{
    free(p->name);
    free(p->model);
    free(p->key_env);
    free(p->host);
    free(p->addr);
    free(p->path);
    free(p->host_header);
}

void orch_model_free(struct orch_model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        provider_release(&m->p[i]);
    free(m->p);
    SSL_CTX_free(m->ssl);
    free(m);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Splits url into scheme, host, port and the request path (the API path
 * appended by the rule in the header). */
static int parse_url(struct provider *p, const char *url, size_t i,
                     struct fo_err *err)
{
    struct evhttp_uri *u = NULL;
    struct fo_buf path;
    fo_buf_init(&path, ORCH_MODEL_URL_MAX);
    int rc = FO_E_INVALID;
    if (strlen(url) > ORCH_MODEL_URL_MAX) {
        fo_err_set(err, rc, "provider %zu: url: over %d bytes", i,
                   ORCH_MODEL_URL_MAX);
        goto out;
    }
    u = evhttp_uri_parse_with_flags(url, 0);
    const char *scheme = u ? evhttp_uri_get_scheme(u) : NULL;
    const char *host = u ? evhttp_uri_get_host(u) : NULL;
    if (!scheme || !host || !*host ||
        (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)) {
        fo_err_set(err, rc, "provider %zu: url: not an http:// or https:// URL",
                   i);
        goto out;
    }
    if (evhttp_uri_get_userinfo(u) || evhttp_uri_get_fragment(u)) {
        fo_err_set(err, rc,
                   "provider %zu: url: user info and fragments are not "
                   "allowed (use api_key_env)",
                   i);
        goto out;
    }
    p->tls = strcmp(scheme, "https") == 0;
    int port = evhttp_uri_get_port(u);
    p->port = port > 0 ? port : (p->tls ? 443 : 80);
    p->host = orch_strdup(host);
    /* "localhost" is loopback without a lookup (RFC 6761), and IPv4: where
     * /etc/hosts puts ::1 first, local model servers still listen on
     * 127.0.0.1 (libevent connects to the first address only) */
    unsigned char ip[16];
    int literal =
        inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
    int local = strcasecmp(host, "localhost") == 0;
    if (literal || local)
        p->addr = orch_strdup(literal ? host : "127.0.0.1");
    const char *up = evhttp_uri_get_path(u);
    if (!up)
        up = "";
    size_t ul = strlen(up);
    while (ul > 0 && up[ul - 1] == '/')
        ul--;
    const char *full =
        p->api == ORCH_EXEC_CHAT ? "/chat/completions" : "/messages";
    const char *v1 =
        p->api == ORCH_EXEC_CHAT ? "/v1/chat/completions" : "/v1/messages";
    char *trimmed = malloc(ul + 1);
    if (!trimmed || !p->host || ((literal || local) && !p->addr)) {
        free(trimmed);
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    memcpy(trimmed, up, ul);
    trimmed[ul] = '\0';
    int r2 = fo_buf_puts(&path, trimmed);
    if (!r2 && !ends_with(trimmed, full))
        r2 = fo_buf_puts(&path, ends_with(trimmed, "/v1") ? full : v1);
    free(trimmed);
    const char *q = evhttp_uri_get_query(u);
    if (!r2 && q)
        r2 = fo_buf_printf(&path, "?%s", q);
    int v6 = strchr(host, ':') != NULL;
    int dflt = p->port == (p->tls ? 443 : 80);
    struct fo_buf hh;
    fo_buf_init(&hh, ORCH_MODEL_URL_MAX);
    if (!r2)
        r2 = dflt ? fo_buf_printf(&hh, v6 ? "[%s]" : "%s", host)
                  : fo_buf_printf(&hh, v6 ? "[%s]:%d" : "%s:%d", host, p->port);
    if (r2) {
        fo_buf_release(&hh);
        rc = fo_err_set(err, r2, "provider %zu: url: too long", i);
        goto out;
    }
    p->host_header = fo_buf_detach(&hh, NULL);
    p->path = fo_buf_detach(&path, NULL);
    if (!p->path || !p->host_header) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    rc = FO_OK;
out:
    if (u)
        evhttp_uri_free(u);
    fo_buf_release(&path);
    return rc;
}

static int make_ssl_ctx(struct orch_model *m, const char *ca_file,
                        struct fo_err *err)
{
    m->ssl = SSL_CTX_new(TLS_client_method());
    if (!m->ssl)
        return fo_err_set(err, FO_E_NOMEM, "tls: cannot create a context");
    SSL_CTX_set_verify(m->ssl, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_options(m->ssl, SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* thousands of connections wait for models at once: an idle one gives
     * its record buffers back (~17 KiB each, measured) */
    SSL_CTX_set_mode(m->ssl, SSL_MODE_RELEASE_BUFFERS);
    if (!SSL_CTX_set_min_proto_version(m->ssl, TLS1_2_VERSION))
        return fo_err_set(err, FO_E_IO, "tls: cannot require TLS 1.2");
    int ok = ca_file ? SSL_CTX_load_verify_locations(m->ssl, ca_file, NULL)
                     : SSL_CTX_set_default_verify_paths(m->ssl);
    if (ok != 1) {
        ERR_clear_error();
        return fo_err_set(err, FO_E_IO, "tls: cannot load the CA store%s%s",
                          ca_file ? " " : "", ca_file ? ca_file : "");
    }
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
        p->api = c->api;
        p->tier = c->tier;
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
        any_tls |= p->tls;
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
        rc = make_ssl_ctx(m, cfg->ca_file, err);
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
            get_int(e, "max_tokens", 1000000, &p->max_tokens, err, where))
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
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(j, "content");
        const cJSON *part;
        int texts = 0;
        if (!cJSON_IsArray(content)) {
            fo_err_set(err, rc, "provider %s: the answer has no content list",
                       p->name);
            goto out;
        }
        cJSON_ArrayForEach (part, content) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (cJSON_IsString(type) &&
                strcmp(type->valuestring, "tool_use") == 0) {
                const cJSON *id = cJSON_GetObjectItemCaseSensitive(part, "id");
                const cJSON *name =
                    cJSON_GetObjectItemCaseSensitive(part, "name");
                const cJSON *in =
                    cJSON_GetObjectItemCaseSensitive(part, "input");
                if (!cJSON_IsString(id) || !cJSON_IsString(name) || !in) {
                    fo_err_set(err, rc,
                               "provider %s: a tool_use part of the answer "
                               "has no id, name or input",
                               p->name);
                    goto out;
                }
                if (add_call(calls, id->valuestring, name->valuestring, in, tn))
                    goto nomem;
                continue;
            }
            if (!cJSON_IsString(type) || strcmp(type->valuestring, "text"))
                continue;
            if (!cJSON_IsString(t)) {
                fo_err_set(err, rc,
                           "provider %s: a text part of the answer has no "
                           "text string",
                           p->name);
                goto out;
            }
            texts++;
            if (fo_buf_puts(&text, t->valuestring))
                goto nomem;
        }
        if (!texts && cJSON_GetArraySize(calls) == 0) {
            fo_err_set(err, rc, "provider %s: the answer has no text part",
                       p->name);
            goto out;
        }
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

/* Why our own timers cut an attempt short. */
enum { T_NONE, T_CONNECT, T_DEADLINE };

/* What a call's step timer does when it fires: the phases never overlap,
 * so one event serves them all. */
enum {
    PH_KICK,    /* ask the first provider (queued by the start) */
    PH_CONNECT, /* the attempt has not connected within connect_ms */
    PH_BACKOFF, /* the wait before the next attempt is over */
    PH_JUDGE,   /* the attempt has ended: read its outcome */
};

/* A host name lookup in flight. evdns answers even a cancelled lookup (with
 * EVUTIL_EAI_CANCEL, on a later loop iteration), so the lookup lives on its
 * own: a call lets go of it by clearing c, and the answer frees it. */
struct lookup {
    struct orch_model_call *c; /* NULL once the call has let go */
    struct evdns_getaddrinfo_request *req;
};

/* One request: its connection and what came back. */
struct attempt {
    int live;                        /* begun and not yet released */
    int ended;                       /* libevent's callbacks are ignored */
    struct lookup *lookup;           /* the host name lookup in flight */
    struct evhttp_connection *evcon; /* owns the bufferevent and its SSL */
    struct evhttp_request *req;      /* NULL once libevent has freed it */
    SSL *ssl;                        /* owned by the bufferevent */
    struct event *conn_ev; /* watches dupfd until the socket connects */
    int dupfd;
    int64_t budget_ms; /* what was left of the deadline at the start */
    int setup_rc;      /* the request could not be made: this error */
    int setup_retriable;
    int connected, timed_out, status;
    int dns_error; /* an EVUTIL_EAI_ code, 0 when the lookup went well */
    int req_error; /* an enum evhttp_request_error, or -1 */
    long verify;   /* X509_V_OK unless the peer failed to verify */
    int retry_after;
    int oversize;
    struct fo_buf body;
};

struct orch_model_call {
    const struct orch_model *m;
    struct event_base *base;
    struct evdns_base *dns;
    orch_model_done_fn done;
    void *arg;
    struct event *step;     /* the timer of the PH_ phases */
    struct event *deadline; /* the whole call */
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
static void attempt_judge(struct orch_model_call *c);
static void next_provider(struct orch_model_call *c);

/* Lets go of a lookup in flight; evdns's answer frees it. */
static void lookup_drop(struct attempt *a)
{
    if (!a->lookup)
        return;
    a->lookup->c = NULL;
    evdns_getaddrinfo_cancel(a->lookup->req);
    a->lookup = NULL;
}

static void attempt_release(struct attempt *a)
{
    if (!a->live)
        return;
    lookup_drop(a);
    if (a->conn_ev)
        event_free(a->conn_ev);
    if (a->dupfd >= 0)
        close(a->dupfd);
    if (a->req && !a->evcon) /* made but never handed to a connection */
        evhttp_request_free(a->req);
    if (a->evcon) /* frees the bufferevent, its SSL and any request */
        evhttp_connection_free(a->evcon);
    fo_buf_release(&a->body);
    *a = (struct attempt){.dupfd = -1};
    ERR_clear_error(); /* this thread's OpenSSL queue starts clean next time */
}

static void call_free(struct orch_model_call *c)
{
    attempt_release(&c->a);
    if (c->step)
        event_free(c->step);
    if (c->deadline)
        event_free(c->deadline);
    free(c->msgs);
    free(c->tools);
    fo_buf_release(&c->req_body);
    orch_model_reply_release(&c->rep);
    free(c);
}

/* The call is over: done, then the call is freed. Only ever reached from
 * the call's own timers, so no libevent callback of its connection is on
 * the stack. */
static void finish(struct orch_model_call *c, int rc)
{
    c->rep.elapsed_us = ledger_mono_us() - c->start_us;
    c->finishing = 1;
    c->done(c->arg, rc, &c->rep, &c->err);
    call_free(c);
}

/* Queues the judgement of an attempt that has just ended. It runs from the
 * loop, because the connection it frees may be the one whose callback is
 * running now. */
static void attempt_ended(struct orch_model_call *c)
{
    c->a.ended = 1;
    event_del(c->step);
    c->phase = PH_JUDGE;
    event_active(c->step, EV_TIMEOUT, 1);
}

static void on_error(enum evhttp_request_error e, void *arg)
{
    struct orch_model_call *c = arg;
    if (c->a.ended)
        return;
    c->a.req_error = (int)e;
    /* libevent calls the request callback next (with NULL), then frees */
}

static void on_done(struct evhttp_request *req, void *arg)
{
    struct orch_model_call *c = arg;
    struct attempt *a = &c->a;
    if (a->ended)
        return;
    a->req = NULL; /* libevent frees it when we return */
    if (req && evhttp_request_get_response_code(req) > 0) {
        a->status = evhttp_request_get_response_code(req);
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t n = evbuffer_get_length(in);
        if (n > c->m->response_max) {
            a->oversize = 1;
        } else if (n > 0) {
            const char *data = (const char *)evbuffer_pullup(in, -1);
            if (!data || fo_buf_append(&a->body, data, n) != FO_OK)
                a->oversize = 1; /* out of memory counts as too big */
        }
        const char *ra = evhttp_find_header(
            evhttp_request_get_input_headers(req), "Retry-After");
        if (ra) {
            char *end;
            errno = 0;
            long long v = strtoll(ra, &end, 10);
            if (!errno && end != ra && *end == '\0' && v >= 0 &&
                v <= RETRY_AFTER_MAX)
                a->retry_after = (int)v;
        }
    }
    attempt_ended(c);
}

static int socket_connected(evutil_socket_t fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    /* getpeername succeeds only on a connected socket, and unlike
     * SO_ERROR it leaves the pending error for libevent to read */
    return fd >= 0 && getpeername(fd, (struct sockaddr *)&ss, &sl) == 0;
}

static void close_later(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    close((int)(intptr_t)arg);
}

/* The watcher of the connect: it fires once, connected or failed. */
static void on_connected(evutil_socket_t fd, short what, void *arg)
{
    struct orch_model_call *c = arg;
    struct attempt *a = &c->a;
    (void)what;
    if (socket_connected(fd)) {
        a->connected = 1;
        if (c->phase == PH_CONNECT)
            event_del(c->step);
    }
    /* The duplicate is closed on the next turn of the loop, not now: on a
     * base with EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST (the daemon's) the
     * watcher's removal reaches epoll only when the loop next polls, and a
     * descriptor closed before then leaves its registration behind on the
     * socket (epoll keys it by the open file), reporting it writable on
     * every turn: a busy loop. A timer runs after that poll (1 us: with
     * 0, event_base_once would make it active in this very turn). */
    event_free(a->conn_ev);
    a->conn_ev = NULL;
    static const struct timeval now = {0, 1};
    if (event_base_once(c->base, -1, EV_TIMEOUT, close_later,
                        (void *)(intptr_t)a->dupfd, &now) != 0)
        close(a->dupfd); /* no timer: better a busy turn than a leak */
    a->dupfd = -1;
}

/* Our connect timer or the deadline cuts the attempt short; called from
 * the call's own timers only. */
static void expire(struct orch_model_call *c, int which)
{
    struct attempt *a = &c->a;
    a->timed_out = which;
    a->ended = 1; /* callbacks from the cancel are ignored */
    lookup_drop(a);
    struct evhttp_request *req = a->req;
    a->req = NULL;
    if (req)
        evhttp_cancel_request(req);
    event_del(c->step);
    attempt_judge(c);
}

static void on_step(evutil_socket_t fd, short what, void *arg)
{
    struct orch_model_call *c = arg;
    struct attempt *a = &c->a;
    (void)fd;
    (void)what;
    switch (c->phase) {
    case PH_KICK:
        next_provider(c);
        break;
    case PH_BACKOFF:
        attempt_begin(c);
        break;
    case PH_CONNECT:
        /* without a watcher (no descriptor to spare), ask the socket */
        if (!a->connected && a->dupfd < 0)
            a->connected = socket_connected(
                bufferevent_getfd(evhttp_connection_get_bufferevent(a->evcon)));
        if (!a->connected && !a->ended)
            expire(c, T_CONNECT);
        break;
    case PH_JUDGE:
        attempt_judge(c);
        break;
    }
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct orch_model_call *c = arg;
    (void)fd;
    (void)what;
    /* between attempts, the next step finds the deadline passed */
    if (c->a.live && !c->a.ended)
        expire(c, T_DEADLINE);
}

/* Checks the host name (or IP address) of the peer's certificate and sends
 * SNI for names. */
static int ssl_for(const struct orch_model *m, const struct provider *p,
                   SSL **out, struct fo_err *err)
{
    SSL *ssl = SSL_new(m->ssl);
    if (!ssl)
        return fo_err_set(err, FO_E_NOMEM, "tls: cannot create a session");
    unsigned char addr[16];
    int ip = inet_pton(AF_INET, p->host, addr) == 1 ||
             inet_pton(AF_INET6, p->host, addr) == 1;
    int ok;
    if (ip) {
        ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), p->host);
    } else {
        ok = SSL_set1_host(ssl, p->host) &&
             SSL_set_tlsext_host_name(ssl, p->host);
    }
    if (!ok) {
        SSL_free(ssl);
        ERR_clear_error();
        return fo_err_set(err, FO_E_INVALID, "tls: cannot check host %s",
                          p->host);
    }
    *out = ssl;
    return FO_OK;
}

/* Makes the connection to addr (numeric) and sends the request on it; the
 * attempt ends through on_done, our timers or, when the request cannot be
 * made, at once (judged from the loop). */
static void connect_start(struct orch_model_call *c, const char *addr)
{
    const struct orch_model *m = c->m;
    const struct provider *p = c->p;
    struct attempt *a = &c->a;
    struct fo_err *err = &c->err;
    struct bufferevent *bev = NULL;
    int rc = FO_E_NOMEM;
    if (p->tls) {
        rc = ssl_for(m, p, &a->ssl, err);
        if (rc)
            goto fail;
        bev = bufferevent_openssl_socket_new(c->base, -1, a->ssl,
                                             BUFFEREVENT_SSL_CONNECTING,
                                             BEV_OPT_CLOSE_ON_FREE);
        if (!bev) {
            SSL_free(a->ssl);
            a->ssl = NULL;
            goto nomem;
        }
        bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    } else {
        bev = bufferevent_socket_new(c->base, -1, BEV_OPT_CLOSE_ON_FREE);
        if (!bev)
            goto nomem;
    }
    /* addr is numeric, so libevent's own resolution of it (no evdns base)
     * answers at once and the connect has begun when evhttp_make_request
     * returns */
    a->evcon = evhttp_connection_base_bufferevent_new(c->base, NULL, bev, addr,
                                                      (unsigned short)p->port);
    if (!a->evcon) {
        bufferevent_free(bev);
        a->ssl = NULL;
        goto nomem;
    }
    evhttp_connection_set_retries(a->evcon, 0);
    /* libevent's own timer is a backstop only: ours decide */
    evhttp_connection_set_timeout(a->evcon, (int)(a->budget_ms / 1000) + 5);
    evhttp_connection_set_max_body_size(a->evcon, (ev_ssize_t)m->response_max);
    evhttp_connection_set_max_headers_size(a->evcon, 64 * 1024);
    a->req = evhttp_request_new(on_done, c);
    if (!a->req)
        goto nomem;
    evhttp_request_set_error_cb(a->req, on_error);
    struct evkeyvalq *h = evhttp_request_get_output_headers(a->req);
    char cl[32];
    snprintf(cl, sizeof(cl), "%zu", c->req_body.len);
    int bad = evhttp_add_header(h, "Host", p->host_header) ||
              evhttp_add_header(h, "Content-Type", "application/json") ||
              evhttp_add_header(h, "Accept", "application/json") ||
              evhttp_add_header(h, "User-Agent", "forum/0.1") ||
              evhttp_add_header(h, "Connection", "close") ||
              evhttp_add_header(h, "Content-Length", cl);
    if (!bad && p->api == ORCH_EXEC_ANTHROPIC)
        bad = evhttp_add_header(h, "anthropic-version", ANTHROPIC_VERSION) ||
              (c->key && evhttp_add_header(h, "x-api-key", c->key));
    if (!bad && p->api == ORCH_EXEC_CHAT && c->key) {
        struct fo_buf auth;
        fo_buf_init(&auth, 16 * 1024);
        bad = fo_buf_printf(&auth, "Bearer %s", c->key) != FO_OK ||
              evhttp_add_header(h, "Authorization", auth.data);
        fo_buf_release(&auth); /* the key leaves no copy of ours behind */
    }
    if (bad || evbuffer_add(evhttp_request_get_output_buffer(a->req),
                            c->req_body.data, c->req_body.len)) {
        evhttp_request_free(a->req);
        a->req = NULL;
        rc = fo_err_set(err, FO_E_INVALID,
                        "provider %s: cannot build the request headers "
                        "(is the API key one line?)",
                        p->name);
        goto fail;
    }
    if (evhttp_make_request(a->evcon, a->req, EVHTTP_REQ_POST, p->path) != 0) {
        a->req = NULL; /* libevent has freed the request */
        rc = fo_err_set(err, FO_E_UNAVAILABLE,
                        "provider %s: cannot connect to %s:%d", p->name,
                        p->host, p->port);
        a->setup_retriable = 1;
        goto fail;
    }
    if (a->ended) /* libevent failed it at once; the judgement is queued */
        return;
    evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd >= 0)
        a->dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (a->dupfd >= 0) {
        a->conn_ev = event_new(c->base, a->dupfd, EV_WRITE, on_connected, c);
        if (!a->conn_ev || event_add(a->conn_ev, NULL) != 0) {
            if (a->conn_ev)
                event_free(a->conn_ev);
            a->conn_ev = NULL;
            close(a->dupfd);
            a->dupfd = -1;
        }
    }
    if (m->connect_ms < a->budget_ms) {
        struct timeval ct = tv_ms(m->connect_ms);
        c->phase = PH_CONNECT;
        evtimer_add(c->step, &ct);
    }
    return;
nomem:
    rc = fo_err_set(err, FO_E_NOMEM, NULL);
fail:
    a->setup_rc = rc;
    attempt_ended(c);
}

/* The first address of ai, numeric, into out; 0 when there is none. */
static int first_addr(const struct evutil_addrinfo *ai, char *out, size_t size)
{
    for (; ai; ai = ai->ai_next) {
        const void *src = NULL;
        if (ai->ai_family == AF_INET)
            src = &((const struct sockaddr_in *)(const void *)ai->ai_addr)
                       ->sin_addr;
        else if (ai->ai_family == AF_INET6)
            src = &((const struct sockaddr_in6 *)(const void *)ai->ai_addr)
                       ->sin6_addr;
        if (src && evutil_inet_ntop(ai->ai_family, src, out, size))
            return 1;
    }
    return 0;
}

static void on_resolved(int result, struct evutil_addrinfo *ai, void *arg)
{
    struct lookup *lk = arg;
    struct orch_model_call *c = lk->c;
    char addr[INET6_ADDRSTRLEN];
    int found = result == 0 && first_addr(ai, addr, sizeof(addr));
    if (ai)
        evutil_freeaddrinfo(ai);
    free(lk);
    if (!c) /* the call let go of it */
        return;
    c->a.lookup = NULL;
    if (!found) {
        c->a.dns_error = result ? result : EVUTIL_EAI_NODATA;
        attempt_ended(c);
        return;
    }
    connect_start(c, addr);
}

/* Looks up p's host with evdns, then connects. */
static void lookup_start(struct orch_model_call *c)
{
    struct attempt *a = &c->a;
    struct lookup *lk = calloc(1, sizeof(*lk));
    if (!lk) {
        a->setup_rc = fo_err_set(&c->err, FO_E_NOMEM, NULL);
        attempt_ended(c);
        return;
    }
    lk->c = c;
    a->lookup = lk;
    struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC,
                                    .ai_flags = EVUTIL_AI_ADDRCONFIG,
                                    .ai_socktype = SOCK_STREAM,
                                    .ai_protocol = IPPROTO_TCP};
    struct evdns_getaddrinfo_request *r =
        evdns_getaddrinfo(c->dns, c->p->host, NULL, &hints, on_resolved, lk);
    /* NULL: the answer came at once (a hosts entry, an error) and lk is
     * gone; else the answer comes from the loop */
    if (r)
        lk->req = r;
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

/* One request to c->p, while the deadline allows it. */
static void attempt_begin(struct orch_model_call *c)
{
    struct attempt *a = &c->a;
    c->k++;
    int64_t left = (c->deadline_us - ledger_mono_us()) / 1000;
    if (left <= 0) {
        int rc = fo_err_set(&c->err, FO_E_TIMEOUT,
                            "provider %s: the deadline passed", c->p->name);
        c->rep.retriable = 1;
        provider_end(c, rc, 1);
        return;
    }
    *a = (struct attempt){.live = 1,
                          .dupfd = -1,
                          .req_error = -1,
                          .verify = X509_V_OK,
                          .budget_ms = left};
    fo_buf_init(&a->body, c->m->response_max);
    c->rep.attempts++;
    if (c->p->addr)
        connect_start(c, c->p->addr);
    else
        lookup_start(c);
}

/* Reads the outcome of the attempt that ended: the answer, a retry after
 * the backoff, the next provider or the end of the call. */
static void attempt_judge(struct orch_model_call *c)
{
    const struct orch_model *m = c->m;
    const struct provider *p = c->p;
    struct attempt *a = &c->a;
    struct fo_err *err = &c->err;
    int retriable = 0;
    int rc;
    if (a->ssl && a->verify == X509_V_OK)
        a->verify = SSL_get_verify_result(a->ssl);
    if (a->setup_rc) {
        rc = a->setup_rc;
        retriable = a->setup_retriable;
    } else if (a->timed_out == T_DEADLINE) {
        rc = fo_err_set(err, FO_E_TIMEOUT,
                        "provider %s: no answer within the %lld ms deadline",
                        p->name, (long long)a->budget_ms);
        retriable = 1;
    } else if (a->timed_out == T_CONNECT) {
        rc = fo_err_set(err, FO_E_UNAVAILABLE,
                        "provider %s: connect to %s:%d timed out after %d ms",
                        p->name, p->host, p->port, m->connect_ms);
        retriable = 1;
    } else if (a->dns_error) {
        rc = fo_err_set(err, FO_E_UNAVAILABLE,
                        "provider %s: cannot look up %s: %s", p->name, p->host,
                        evutil_gai_strerror(a->dns_error));
        retriable = 1;
    } else if (a->verify != X509_V_OK) {
        rc = fo_err_set(err, FO_E_UPSTREAM,
                        "provider %s: tls: the certificate of %s did not "
                        "verify: %s",
                        p->name, p->host,
                        X509_verify_cert_error_string(a->verify));
    } else if (a->req_error == EVREQ_HTTP_DATA_TOO_LONG || a->oversize) {
        /* libevent 2.1 reports a corrupt chunked body the same way */
        rc = fo_err_set(err, FO_E_UPSTREAM,
                        "provider %s: response over the %zu-byte cap%s",
                        p->name, m->response_max,
                        a->oversize ? "" : " (or a malformed chunked body)");
    } else if (a->status > 0) {
        rc = FO_OK;
    } else if (!a->connected) {
        rc = fo_err_set(err, FO_E_UNAVAILABLE,
                        "provider %s: cannot connect to %s:%d", p->name,
                        p->host, p->port);
        retriable = 1;
    } else {
        int malformed = a->req_error == EVREQ_HTTP_INVALID_HEADER;
        rc = fo_err_set(err, malformed ? FO_E_UPSTREAM : FO_E_UNAVAILABLE,
                        "provider %s: %s from %s:%d", p->name,
                        malformed ? "a malformed HTTP response"
                                  : "the connection closed without an answer",
                        p->host, p->port);
        retriable = !malformed;
    }
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
    c->a.dupfd = -1;
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
        if (!p->addr && !dns) {
            rc = fo_err_set(err, FO_E_INVALID,
                            "provider %s: host %s needs a resolver (dns)",
                            p->name, p->host);
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
    c->deadline = evtimer_new(base, on_deadline, c);
    struct timeval dl = tv_ms(m->timeout_ms);
    if (!c->step || !c->deadline || evtimer_add(c->deadline, &dl) != 0)
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
    struct evdns_base *dns =
        evdns_base_new(base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    if (!dns)
        return fo_err_set(err, FO_E_NOMEM, "dns: cannot create a resolver");
    /* Not EVDNS_BASE_INITIALIZE_NAMESERVERS: with it evdns_base_new fails
     * when /etc/resolv.conf is missing. This reads /etc/hosts first and
     * without resolv.conf (1) asks 127.0.0.1, as the C library does. */
    int r =
        evdns_base_resolv_conf_parse(dns, DNS_OPTIONS_ALL, "/etc/resolv.conf");
    if (r != 0 && r != 1) {
        evdns_base_free(dns, 0);
        return fo_err_set(err, r == 4 ? FO_E_NOMEM : FO_E_IO,
                          "dns: cannot read /etc/resolv.conf (error %d)", r);
    }
    *out = dns;
    return FO_OK;
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
        if (!m->p[cand[i]].addr)
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
        rc = orch_model_dns_create(base, &dns, err);
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

/* ---- the executor hook --------------------------------------------------- */

int orch_model_exec(const struct orch_exec_config *cfg, const char *prompt,
                    struct orch_result *res, struct fo_err *err)
{
    struct orch_model_reply rep;
    struct fo_err cerr;
    fo_err_clear(&cerr);
    *res = (struct orch_result){.exit_code = -1};
    struct orch_model_msg msg = {.role = "user", .content = prompt};
    int rc = FO_OK;
    int crc = cfg->models ? orch_model_call(cfg->models, cfg->kind, cfg->tier,
                                            &msg, 1, &rep, &cerr)
                          : fo_err_set(&cerr, FO_E_INVALID,
                                       "executor %s: no model configured",
                                       orch_exec_name(cfg->kind));
    if (!cfg->models)
        rep = (struct orch_model_reply){0};
    if (crc == FO_E_NOMEM) {
        rc = fo_err_set(err, crc, NULL);
        goto out;
    }
    snprintf(res->model, sizeof(res->model), "%s",
             rep.model[0] ? rep.model : (cfg->model ? cfg->model : "model"));
    res->elapsed_us = rep.elapsed_us;
    res->ok = crc == FO_OK;
    res->timed_out = crc == FO_E_TIMEOUT;
    res->exit_code = res->ok ? 0 : -1;
    if (!res->ok)
        snprintf(res->error, sizeof(res->error), "%s", cerr.msg);
    if (res->ok) {
        res->output = rep.text;
        res->output_len = rep.text_len;
        rep.text = NULL;
    } else {
        res->output = malloc(1);
        if (res->output)
            res->output[0] = '\0';
    }
    res->errout = malloc(1);
    if (!res->output || !res->errout) {
        orch_result_release(res);
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    res->errout[0] = '\0';
out:
    orch_model_reply_release(&rep);
    return rc;
}

/* ---- one provider alone (forum doctor) --------------------------------- */

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
    snprintf(url, cap, "%s://%s%s", p->tls ? "https" : "http", p->host_header,
             p->path);
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
