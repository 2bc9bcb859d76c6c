/* orch_model: the chat (OpenAI-compatible) and Anthropic model executors
 * on libevent's HTTP client: one event_base per request so any thread may
 * call, TLS verified through libevent_openssl, our own connect and total
 * deadline timers, a response cap, classified errors with backoff. */
#include "daemon/orch_model.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
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

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                          .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* ---- configuration ------------------------------------------------------ */

static void provider_release(struct provider *p)
{
    free(p->name);
    free(p->model);
    free(p->key_env);
    free(p->host);
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
    if (!trimmed || !p->host) {
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

/* ---- one request -------------------------------------------------------- */

enum { T_NONE, T_CONNECT, T_DEADLINE };

struct attempt {
    struct event_base *base;
    struct evhttp_connection *evcon;
    struct evhttp_request *req; /* NULL once libevent has freed it */
    SSL *ssl;                   /* owned by the bufferevent */
    struct event *conn_ev, *conn_timer, *deadline_timer;
    int dupfd;
    int done, connected, timed_out, status;
    int req_error; /* an enum evhttp_request_error, or -1 */
    long verify;   /* X509_V_OK unless the peer failed to verify */
    int retry_after;
    struct fo_buf body;
    size_t body_max;
    int oversize;
};

static void finish_attempt(struct attempt *a)
{
    a->done = 1;
    a->req = NULL;
    if (a->ssl && a->verify == X509_V_OK)
        a->verify = SSL_get_verify_result(a->ssl);
    event_base_loopbreak(a->base);
}

static void on_error(enum evhttp_request_error e, void *arg)
{
    struct attempt *a = arg;
    if (a->done)
        return;
    a->req_error = (int)e;
    /* libevent calls the request callback next (with NULL), then frees */
}

static void on_done(struct evhttp_request *req, void *arg)
{
    struct attempt *a = arg;
    if (a->done)
        return;
    if (req && evhttp_request_get_response_code(req) > 0) {
        a->status = evhttp_request_get_response_code(req);
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t n = evbuffer_get_length(in);
        if (n > a->body_max) {
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
    finish_attempt(a);
}

static void on_connected(evutil_socket_t fd, short what, void *arg)
{
    struct attempt *a = arg;
    (void)what;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    /* getpeername succeeds only on a connected socket, and unlike
     * SO_ERROR it leaves the pending error for libevent to read */
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
        a->connected = 1;
        if (a->conn_timer)
            event_del(a->conn_timer);
    }
}

static void expire(struct attempt *a, int which)
{
    if (a->done)
        return;
    a->timed_out = which;
    struct evhttp_request *req = a->req;
    a->done = 1; /* callbacks from the cancel are ignored */
    a->req = NULL;
    if (req)
        evhttp_cancel_request(req);
    event_base_loopbreak(a->base);
}

static void on_connect_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    expire(arg, T_CONNECT);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    expire(arg, T_DEADLINE);
}

static void attempt_release(struct attempt *a)
{
    if (a->conn_ev)
        event_free(a->conn_ev);
    if (a->conn_timer)
        event_free(a->conn_timer);
    if (a->deadline_timer)
        event_free(a->deadline_timer);
    if (a->dupfd >= 0)
        close(a->dupfd);
    if (a->evcon) /* frees the bufferevent, its SSL and any request */
        evhttp_connection_free(a->evcon);
    if (a->base)
        event_base_free(a->base);
    fo_buf_release(&a->body);
}

static struct timeval tv_ms(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000),
                         .tv_usec = (suseconds_t)((ms % 1000) * 1000)};
    return tv;
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

/* One POST. Returns FO_OK when an HTTP response arrived (any status; a is
 * filled); else the failure, with *retriable set. */
static int post(const struct orch_model *m, const struct provider *p,
                const char *key, const struct fo_buf *body, int64_t budget_ms,
                struct attempt *a, int *retriable, struct fo_err *err)
{
    struct bufferevent *bev = NULL;
    int rc = FO_E_NOMEM;
    *retriable = 0;
    a->base = event_base_new();
    if (!a->base)
        goto nomem;
    if (p->tls) {
        rc = ssl_for(m, p, &a->ssl, err);
        if (rc)
            goto out;
        bev = bufferevent_openssl_socket_new(a->base, -1, a->ssl,
                                             BUFFEREVENT_SSL_CONNECTING,
                                             BEV_OPT_CLOSE_ON_FREE);
        if (!bev) {
            SSL_free(a->ssl);
            a->ssl = NULL;
            goto nomem;
        }
        bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    } else {
        bev = bufferevent_socket_new(a->base, -1, BEV_OPT_CLOSE_ON_FREE);
        if (!bev)
            goto nomem;
    }
    /* with no evdns base, libevent resolves the host synchronously, so the
     * connect has begun when evhttp_make_request returns */
    a->evcon = evhttp_connection_base_bufferevent_new(
        a->base, NULL, bev, p->host, (unsigned short)p->port);
    if (!a->evcon) {
        bufferevent_free(bev);
        a->ssl = NULL;
        goto nomem;
    }
    evhttp_connection_set_retries(a->evcon, 0);
    /* libevent's own timer is a backstop only: ours decide */
    evhttp_connection_set_timeout(a->evcon, (int)(budget_ms / 1000) + 5);
    evhttp_connection_set_max_body_size(a->evcon, (ev_ssize_t)a->body_max);
    evhttp_connection_set_max_headers_size(a->evcon, 64 * 1024);
    a->req = evhttp_request_new(on_done, a);
    if (!a->req)
        goto nomem;
    evhttp_request_set_error_cb(a->req, on_error);
    struct evkeyvalq *h = evhttp_request_get_output_headers(a->req);
    char cl[32];
    snprintf(cl, sizeof(cl), "%zu", body->len);
    int bad = evhttp_add_header(h, "Host", p->host_header) ||
              evhttp_add_header(h, "Content-Type", "application/json") ||
              evhttp_add_header(h, "Accept", "application/json") ||
              evhttp_add_header(h, "User-Agent", "forum/0.1") ||
              evhttp_add_header(h, "Connection", "close") ||
              evhttp_add_header(h, "Content-Length", cl);
    if (!bad && p->api == ORCH_EXEC_ANTHROPIC)
        bad = evhttp_add_header(h, "anthropic-version", ANTHROPIC_VERSION) ||
              (key && evhttp_add_header(h, "x-api-key", key));
    if (!bad && p->api == ORCH_EXEC_CHAT && key) {
        struct fo_buf auth;
        fo_buf_init(&auth, 16 * 1024);
        bad = fo_buf_printf(&auth, "Bearer %s", key) != FO_OK ||
              evhttp_add_header(h, "Authorization", auth.data);
        fo_buf_release(&auth); /* the key leaves no copy of ours behind */
    }
    if (bad || evbuffer_add(evhttp_request_get_output_buffer(a->req),
                            body->data, body->len)) {
        evhttp_request_free(a->req);
        a->req = NULL;
        rc = fo_err_set(err, FO_E_INVALID,
                        "provider %s: cannot build the request headers "
                        "(is the API key one line?)",
                        p->name);
        goto out;
    }
    a->deadline_timer = evtimer_new(a->base, on_deadline, a);
    a->conn_timer = evtimer_new(a->base, on_connect_timer, a);
    if (!a->deadline_timer || !a->conn_timer) {
        evhttp_request_free(a->req);
        a->req = NULL;
        goto nomem;
    }
    struct evhttp_request *req = a->req;
    if (evhttp_make_request(a->evcon, req, EVHTTP_REQ_POST, p->path) != 0) {
        /* libevent has freed the request */
        a->req = NULL;
        rc = fo_err_set(err, FO_E_UNAVAILABLE,
                        "provider %s: cannot connect to %s:%d", p->name,
                        p->host, p->port);
        *retriable = 1;
        goto out;
    }
    struct timeval dl = tv_ms(budget_ms);
    struct timeval ct =
        tv_ms(m->connect_ms < budget_ms ? m->connect_ms : budget_ms);
    evtimer_add(a->deadline_timer, &dl);
    if (!a->done) {
        evutil_socket_t fd = bufferevent_getfd(bev);
        if (fd >= 0)
            a->dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (a->dupfd >= 0) {
            a->conn_ev =
                event_new(a->base, a->dupfd, EV_WRITE, on_connected, a);
            if (a->conn_ev)
                event_add(a->conn_ev, NULL);
        }
        if (m->connect_ms < budget_ms)
            evtimer_add(a->conn_timer, &ct);
    }
    while (!a->done)
        if (event_base_loop(a->base, EVLOOP_ONCE) < 0)
            break;
    if (a->timed_out == T_DEADLINE) {
        rc = fo_err_set(err, FO_E_TIMEOUT,
                        "provider %s: no answer within the %lld ms deadline",
                        p->name, (long long)budget_ms);
        *retriable = 1;
    } else if (a->timed_out == T_CONNECT) {
        rc = fo_err_set(err, FO_E_UNAVAILABLE,
                        "provider %s: connect to %s:%d timed out after %d ms",
                        p->name, p->host, p->port, m->connect_ms);
        *retriable = 1;
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
                        p->name, a->body_max,
                        a->oversize ? "" : " (or a malformed chunked body)");
    } else if (a->status > 0) {
        rc = FO_OK;
    } else if (!a->connected) {
        rc = fo_err_set(err, FO_E_UNAVAILABLE,
                        "provider %s: cannot connect to %s:%d", p->name,
                        p->host, p->port);
        *retriable = 1;
    } else {
        int malformed = a->req_error == EVREQ_HTTP_INVALID_HEADER;
        rc = fo_err_set(err, malformed ? FO_E_UPSTREAM : FO_E_UNAVAILABLE,
                        "provider %s: %s from %s:%d", p->name,
                        malformed ? "a malformed HTTP response"
                                  : "the connection closed without an answer",
                        p->host, p->port);
        *retriable = !malformed;
    }
    ERR_clear_error(); /* this thread's OpenSSL queue starts clean next time */
    return rc;
nomem:
    rc = fo_err_set(err, FO_E_NOMEM, NULL);
out:
    ERR_clear_error();
    return rc;
}

/* ---- bodies ------------------------------------------------------------- */

static int build_body(const struct provider *p,
                      const struct orch_model_msg *msgs, size_t n,
                      struct fo_buf *out, struct fo_err *err)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "messages") : NULL;
    struct fo_buf sys;
    fo_buf_init(&sys, FO_BUF_UNLIMITED);
    int rc = FO_E_NOMEM;
    if (!arr || !cJSON_AddStringToObject(o, "model", p->model))
        goto out;
    if (p->api == ORCH_EXEC_ANTHROPIC &&
        !fo_json_add_int(o, "max_tokens", p->max_tokens))
        goto out;
    for (size_t i = 0; i < n; i++) {
        const char *role = msgs[i].role, *c = msgs[i].content;
        if (!role || !c ||
            (strcmp(role, "system") && strcmp(role, "user") &&
             strcmp(role, "assistant")) ||
            !fo_utf8_valid(c, strlen(c))) {
            rc = fo_err_set(err, FO_E_INVALID,
                            "message %zu: needs role system, user or "
                            "assistant and UTF-8 content",
                            i);
            goto out;
        }
        if (p->api == ORCH_EXEC_ANTHROPIC && strcmp(role, "system") == 0) {
            if ((sys.len && fo_buf_puts(&sys, "\n\n")) || fo_buf_puts(&sys, c))
                goto out;
            continue;
        }
        cJSON *mo = cJSON_CreateObject();
        if (!mo)
            goto out;
        cJSON_AddItemToArray(arr, mo);
        if (!cJSON_AddStringToObject(mo, "role", role) ||
            !cJSON_AddStringToObject(mo, "content", c))
            goto out;
    }
    if (sys.len && !cJSON_AddStringToObject(o, "system", sys.data))
        goto out;
    rc = fo_json_canon(o, out, err);
out:
    if (rc == FO_E_NOMEM)
        fo_err_set(err, rc, NULL);
    cJSON_Delete(o);
    fo_buf_release(&sys);
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

/* Reads the answer of a 2xx body: the text and the model id. */
static int parse_answer(const struct provider *p, const struct fo_buf *body,
                        struct orch_model_reply *out, struct fo_err *err)
{
    cJSON *j = NULL;
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
    if (p->api == ORCH_EXEC_CHAT) {
        const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "choices");
        const cJSON *c0 = cJSON_IsArray(ch) ? cJSON_GetArrayItem(ch, 0) : NULL;
        const cJSON *msg =
            c0 ? cJSON_GetObjectItemCaseSensitive(c0, "message") : NULL;
        const cJSON *content =
            msg ? cJSON_GetObjectItemCaseSensitive(msg, "content") : NULL;
        if (!cJSON_IsString(content)) {
            fo_err_set(err, rc,
                       "provider %s: the answer has no "
                       "choices[0].message.content string",
                       p->name);
            goto out;
        }
        if (fo_buf_puts(&text, content->valuestring))
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
        if (!texts) {
            fo_err_set(err, rc, "provider %s: the answer has no text part",
                       p->name);
            goto out;
        }
    }
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
    cJSON_Delete(j);
    fo_buf_release(&text);
    return rc;
}

/* ---- the call ------------------------------------------------------------ */

void orch_model_reply_release(struct orch_model_reply *r)
{
    if (!r)
        return;
    free(r->text);
    r->text = NULL;
    r->text_len = 0;
}

/* One provider, its retries. *give_up is set when no other provider
 * should be tried (a non-retriable failure, the deadline, no memory). */
static int ask(const struct orch_model *m, const struct provider *p,
               const struct orch_model_msg *msgs, size_t n, int64_t deadline,
               struct orch_model_reply *out, int *give_up, struct fo_err *err)
{
    struct fo_buf body;
    fo_buf_init(&body, FO_BUF_UNLIMITED);
    const char *key = NULL;
    int rc;
    *give_up = 1;
    snprintf(out->model, sizeof(out->model), "%s", p->model);
    snprintf(out->provider, sizeof(out->provider), "%s", p->name);
    out->api = p->api;
    if (p->key_env) {
        key = secure_getenv(p->key_env);
        if (!key || !*key) {
            rc = fo_err_set(err, FO_E_INVALID,
                            "provider %s: the API key variable %s is not set",
                            p->name, p->key_env);
            goto out;
        }
    }
    rc = build_body(p, msgs, n, &body, err);
    if (rc)
        goto out;
    int64_t delay = m->backoff_ms;
    for (int k = 1;; k++) {
        int64_t left = (deadline - ledger_mono_us()) / 1000;
        if (left <= 0) {
            rc = fo_err_set(err, FO_E_TIMEOUT,
                            "provider %s: the deadline passed", p->name);
            out->retriable = 1;
            goto out;
        }
        struct attempt a = {.dupfd = -1, .req_error = -1, .verify = X509_V_OK};
        fo_buf_init(&a.body, m->response_max);
        a.body_max = m->response_max;
        int retriable = 0;
        out->attempts++;
        rc = post(m, p, key, &body, left, &a, &retriable, err);
        out->http_status = a.status;
        if (rc == FO_OK) {
            if (a.status >= 200 && a.status < 300) {
                rc = parse_answer(p, &a.body, out, err);
            } else {
                char snip[SNIPPET_MAX + 1];
                error_snippet(&a.body, key, snip, sizeof(snip));
                retriable = a.status == 429 || a.status >= 500;
                rc = fo_err_set(
                    err, retriable ? FO_E_UNAVAILABLE : FO_E_UPSTREAM,
                    "provider %s: HTTP %d%s%s%s", p->name, a.status,
                    a.status == 401 || a.status == 403 ? " (check the API key)"
                                                       : "",
                    snip[0] ? ": " : "", snip);
            }
        }
        int retry_after = a.retry_after;
        attempt_release(&a);
        out->retriable = retriable;
        if (rc == FO_OK || !retriable)
            goto out;
        if (err)
            scrub(err->msg, sizeof(err->msg), key);
        if (k >= m->attempts) {
            *give_up = rc == FO_E_TIMEOUT;
            if (rc != FO_E_TIMEOUT)
                fo_err_prefix(err, "%d attempts failed", k);
            goto out;
        }
        int64_t wait = delay;
        if (retry_after > 0 && (int64_t)retry_after * 1000 > wait &&
            (int64_t)retry_after * 1000 <= m->backoff_max_ms)
            wait = (int64_t)retry_after * 1000;
        if (ledger_mono_us() + wait * 1000 >= deadline) {
            rc = fo_err_set(err, FO_E_TIMEOUT,
                            "provider %s: the deadline leaves no room for "
                            "attempt %d",
                            p->name, k + 1);
            goto out;
        }
        sleep_ms(wait);
        delay = delay * 2 > m->backoff_max_ms ? m->backoff_max_ms : delay * 2;
    }
out:
    if (err)
        scrub(err->msg, sizeof(err->msg), key);
    fo_buf_release(&body);
    return rc;
}

int orch_model_call(const struct orch_model *m, int api, int tier,
                    const struct orch_model_msg *msgs, size_t n_msgs,
                    struct orch_model_reply *out, struct fo_err *err)
{
    int64_t start = ledger_mono_us();
    int64_t deadline = start + (int64_t)m->timeout_ms * 1000;
    *out = (struct orch_model_reply){0};
    int rc = FO_E_INVALID;
    if (n_msgs == 0 || !msgs) {
        fo_err_set(err, rc, "model call: no messages");
        goto out;
    }
    int asked = 0;
    /* pass 0: providers of the tier; pass 1: those of every tier */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < m->n; i++) {
            const struct provider *p = &m->p[i];
            if (api != ORCH_EXEC_DEFAULT && p->api != api)
                continue;
            if (pass == 0 ? p->tier != tier || tier == ORCH_TIER_ANY
                          : p->tier != ORCH_TIER_ANY)
                continue;
            int give_up;
            asked++;
            rc = ask(m, p, msgs, n_msgs, deadline, out, &give_up, err);
            if (rc == FO_OK || give_up || !m->fallover)
                goto out;
        }
    }
    if (!asked)
        fo_err_set(err, rc, "no %s provider for tier %s",
                   api == ORCH_EXEC_DEFAULT ? "model" : orch_exec_name(api),
                   tier == ORCH_TIER_ANY ? "any" : orch_tier_name(tier));
out:
    out->elapsed_us = ledger_mono_us() - start;
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
