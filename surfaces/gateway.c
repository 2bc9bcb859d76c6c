/* gateway: see gateway.h. A call is a small state machine on the loop:
 * the client's request is checked and sent on with httpc; a plain answer
 * is kept whole, a stream relayed as it arrives (and read by the SSE
 * reader for the witnessed text and usage); once the upstream is done the
 * entry is queued to the committer, and its callback (committer thread)
 * wakes the loop, which answers the client (or ends the stream). */
#include "surfaces/gateway.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/keyvalq_struct.h>
#include <openssl/crypto.h>

#include "daemon/httpc.h"
#include "daemon/keys.h"
#include "daemon/orch_guard.h"
#include "surfaces/gateway_anthropic.h"
#include "surfaces/gateway_forge.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "ledger/fo_sha.h"

#define GW_RAW_MAX (8u << 20)       /* bytes of a response kept for hashing */
#define GW_WITNESS_MAX (256u << 10) /* a witnessed body; over: hash only */
#define GW_SSE_EVENT_MAX (1u << 20)
#define GW_SESSION_MAX 128
#define GW_TRIES_MAX 3 /* providers tried for one call (fallover) */

enum { GW_CHAT, GW_ANTHROPIC, GW_RESPONSES };

/* idle keep-alive connections kept per provider: as many as calls at once
 * in a busy run, so that a burst does not close and reopen them */
#define GW_POOL_IDLE 128

struct surf_gateway {
    struct surf_gateway_config cfg;
    struct httpc_tls *tls;
    struct httpc_pool *pool; /* keep-alive connections to the providers */
    struct orch_guard guard;
};

struct gw_call {
    struct surf_gateway *g;
    struct surf_http *h;
    struct evhttp_request *req;
    int64_t t0, t_up, ttft_us;
    int api, stream, started;
    int gone;     /* the client hung up */
    int req_lost; /* ... and its connection freed the request */
    const struct orch_model_provider *p;
    struct httpc_url url;
    struct httpc_req *up;
    char *body; /* the client's request, as sent on */
    size_t body_len;
    /* the providers that serve the model, tried in order (fallover) */
    const struct orch_model_provider *cand[GW_TRIES_MAX];
    int n_cand, try_i;
    int64_t t_try;
    cJSON *attempts; /* the tries that failed over, NULL: none */
    /* Anthropic Messages translated for a chat provider */
    int xlate;
    cJSON *req_json; /* the client's request, parsed */
    char *up_body;   /* the chat request sent on */
    size_t up_body_len;
    struct fo_buf tx; /* the bytes the client was given */
    struct fo_buf gout;
    struct surf_gwa_stream gs;
    char session[GW_SESSION_MAX + 1];
    char model[ORCH_MODEL_MAX + 1];
    /* the client key that made the call ("" for the daemon's token) */
    char key[KEYS_NAME_MAX + 1];
    int64_t key_created;
    int witnessed;
    /* the answer */
    int status;
    const char *error_class; /* NULL: none */
    char error[256];
    struct fo_buf raw;  /* the response's bytes as they came */
    struct fo_buf text; /* a stream's assembled text */
    char ctype[128];
    int64_t tokens_in, tokens_out;
    struct httpc_sse sse;
    struct evbuffer *ssebuf;
    /* a stream's last event ("data: [DONE]", "event: message_stop") and
     * what follows it: sent once the entry is durable */
    struct evbuffer *held;
    int text_cut;   /* the assembled text was over GW_WITNESS_MAX */
    int bad_answer; /* a translated answer could not be read */
    /* the forge layer (gateway_forge.h): on for the key, or for the
     * provider that answers; the tools offered; the forms rescued and the
     * provider's answer's hash when the answer was rewritten */
    int forge_key;
    cJSON *forge_tools;
    cJSON *rescued;
    char orig_sha[2 * FO_SHA256_LEN + 1];
    /* the entry */
    struct ledger_queued_append creq;
    struct fo_buf entry;
    struct event *back;
    int commit_rc;
};

/* ---- errors in each API's shape ---------------------------------------- */

static void reply_error(struct surf_http *h, struct evhttp_request *req,
                        int api, int status, const char *type, const char *msg,
                        int64_t t0)
{
    cJSON *o = cJSON_CreateObject(), *e = cJSON_CreateObject();
    if (o && e) {
        if (api == GW_ANTHROPIC)
            cJSON_AddStringToObject(o, "type", "error");
        cJSON_AddStringToObject(e, "type", type);
        cJSON_AddStringToObject(e, "message", msg);
        if (api != GW_ANTHROPIC)
            cJSON_AddStringToObject(e, "code", type);
        cJSON_AddItemToObject(o, "error", e);
        e = NULL;
    }
    cJSON_Delete(e);
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    char *text = NULL;
    size_t len = 0;
    if (o && fo_json_canon(o, &b, &err) == FO_OK)
        text = fo_buf_detach(&b, &len);
    fo_buf_release(&b);
    cJSON_Delete(o);
    if (status == 401)
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "WWW-Authenticate", "Bearer");
    surf_http_reply(h, req, status, "application/json", text, len, t0);
}

/* ---- choosing the provider --------------------------------------------- */

static int tier_of(const char *s)
{
    for (int t = ORCH_TIER_CHEAP; t <= ORCH_TIER_FRONTIER; t++)
        if (!strcmp(s, orch_tier_name(t)))
            return t;
    return -2;
}

/* The providers of exec api that serve model, at most max into out, in
 * forum.json's order: those whose model or name it is, else (a tier) those
 * of the tier, then those of tier "any". Returns how many. */
static int match(const struct surf_gateway *g, int want, const char *model,
                 const struct orch_model_provider **out, int max)
{
    const struct orch_model_config *mc = g->cfg.models;
    int n = 0;
    for (size_t i = 0; mc && i < mc->n_providers && n < max; i++) {
        const struct orch_model_provider *p = &mc->providers[i];
        if (p->api == want &&
            (!strcmp(p->model, model) || (p->name && !strcmp(p->name, model))))
            out[n++] = p;
    }
    int tier = n ? -2 : tier_of(model);
    for (int pass = 0; tier >= 0 && pass < 2; pass++) {
        for (size_t i = 0; mc && i < mc->n_providers && n < max; i++) {
            const struct orch_model_provider *p = &mc->providers[i];
            if (p->api == want && p->tier == (pass ? ORCH_TIER_ANY : tier))
                out[n++] = p;
        }
    }
    return n;
}

/* The providers for a call to api (c->cand): Anthropic Messages go to the
 * Anthropic providers of the model, else translated to its chat ones. */
static void pick(struct gw_call *c, const char *model)
{
    int want = c->api == GW_ANTHROPIC ? ORCH_EXEC_ANTHROPIC : ORCH_EXEC_CHAT;
    c->n_cand = match(c->g, want, model, c->cand, GW_TRIES_MAX);
    if (!c->n_cand && c->api == GW_ANTHROPIC) {
        c->n_cand = match(c->g, ORCH_EXEC_CHAT, model, c->cand, GW_TRIES_MAX);
        c->xlate = c->n_cand > 0;
    }
}

/* The provider's URL with the API's path (the rule of orch_model.h). */
static int provider_url(const struct orch_model_provider *p, int api,
                        struct httpc_url *u, struct fo_err *err)
{
    const char *url = p->url ? p->url : "https://api.anthropic.com";
    int rc = httpc_url_parse(url, u, err);
    if (rc)
        return rc;
    static const char *const fulls[] = {"/chat/completions", "/messages",
                                        "/responses"};
    static const char *const v1s[] = {"/v1/chat/completions", "/v1/messages",
                                      "/v1/responses"};
    const char *full = fulls[api], *v1 = v1s[api];
    char *q = strchr(u->path, '?');
    size_t ul = q ? (size_t)(q - u->path) : strlen(u->path);
    while (ul > 0 && u->path[ul - 1] == '/')
        ul--;
    struct fo_buf b;
    fo_buf_init(&b, HTTPC_URL_MAX);
    rc = fo_buf_append(&b, u->path, ul) || fo_buf_putc(&b, '\0');
    if (!rc) {
        b.len--;
        size_t fl = strlen(full);
        int has_full = b.len >= fl && !strcmp(b.data + b.len - fl, full);
        int has_v1 = b.len >= 3 && !strcmp(b.data + b.len - 3, "/v1");
        if (!has_full)
            rc = fo_buf_puts(&b, has_v1 ? full : v1);
    }
    if (!rc && q)
        rc = fo_buf_puts(&b, q);
    char *np = rc ? NULL : fo_buf_detach(&b, NULL);
    fo_buf_release(&b);
    if (!np) {
        httpc_url_release(u);
        return fo_err_set(err, FO_E_INVALID, "the provider's URL is too long");
    }
    free(u->path);
    u->path = np;
    return FO_OK;
}

/* ---- the witnessed entry ----------------------------------------------- */

static void add_sha(cJSON *o, const char *key, const void *data, size_t len)
{
    uint8_t d[FO_SHA256_LEN];
    char hex[2 * FO_SHA256_LEN + 1];
    fo_sha256(data ? data : "", len, d);
    fo_hex(d, sizeof(d), hex);
    cJSON_AddStringToObject(o, key, hex);
}

/* The guarded copy of len bytes of text under key: the JSON value when it
 * parses, else the string; only its hash when it is over the limit. */
static void add_guarded(const struct surf_gateway *g, cJSON *o, cJSON *found,
                        const char *key, const char *text, size_t len)
{
    if (len > GW_WITNESS_MAX || !fo_utf8_valid(text ? text : "", len)) {
        char k[64];
        snprintf(k, sizeof(k), "%s_omitted", key);
        cJSON_AddStringToObject(
            o, k, len > GW_WITNESS_MAX ? "over 256 KiB" : "not UTF-8");
        return;
    }
    struct fo_buf out;
    fo_buf_init(&out, FO_BUF_UNLIMITED);
    cJSON *f = NULL;
    long n = orch_guard_scan(&g->guard, text ? text : "", len, &out, &f);
    cJSON *v = NULL;
    struct fo_err err;
    if (n >= 0 && out.len &&
        fo_json_parse(out.data, out.len, &v, &err) == FO_OK) {
        cJSON_AddItemToObject(o, key, v);
    } else if (n >= 0) {
        fo_buf_putc(&out, '\0');
        cJSON_AddStringToObject(o, key, out.data ? out.data : "");
    }
    if (f) {
        cJSON *e;
        cJSON_ArrayForEach (e, f) {
            cJSON *at = cJSON_GetObjectItemCaseSensitive(e, "at");
            if (at)
                cJSON_DeleteItemFromObjectCaseSensitive(e, "at");
            cJSON_AddStringToObject(e, "in", key);
        }
        while (cJSON_GetArraySize(f) > 0)
            cJSON_AddItemToArray(found, cJSON_DetachItemFromArray(f, 0));
        cJSON_Delete(f);
    }
    fo_buf_release(&out);
}

/* Adds the try now over to c->attempts. */
static void try_record(struct gw_call *c)
{
    if (!c->attempts && !(c->attempts = cJSON_CreateArray()))
        return;
    cJSON *a = cJSON_CreateObject();
    if (!a)
        return;
    cJSON_AddStringToObject(a, "provider",
                            c->p->name ? c->p->name : c->p->model);
    fo_json_add_int(a, "status", c->status);
    if (c->error_class)
        cJSON_AddStringToObject(a, "error_class", c->error_class);
    fo_json_add_int(a, "latency_us", ledger_now_us() - c->t_try);
    cJSON_AddItemToArray(c->attempts, a);
}

static int entry_make(struct gw_call *c)
{
    cJSON *o = cJSON_CreateObject(), *found = cJSON_CreateArray();
    if (!o || !found) {
        cJSON_Delete(o);
        cJSON_Delete(found);
        return FO_E_NOMEM;
    }
    int64_t now = ledger_now_us();
    static const char *const apis[] = {"chat", "anthropic", "responses"};
    cJSON_AddStringToObject(o, "api", apis[c->api]);
    if (c->xlate)
        cJSON_AddStringToObject(o, "translated", "chat");
    cJSON_AddStringToObject(o, "model", c->model);
    cJSON_AddStringToObject(o, "provider",
                            c->p->name ? c->p->name : c->p->model);
    if (c->session[0])
        cJSON_AddStringToObject(o, "session", c->session);
    if (c->key[0])
        cJSON_AddStringToObject(o, "key", c->key);
    cJSON_AddBoolToObject(o, "stream", c->stream);
    fo_json_add_int(o, "status", c->status);
    if (c->error_class) {
        cJSON_AddStringToObject(o, "error_class", c->error_class);
        cJSON_AddStringToObject(o, "error", c->error);
    }
    fo_json_add_int(o, "latency_us", now - c->t_up);
    if (c->ttft_us >= 0)
        fo_json_add_int(o, "ttft_us", c->ttft_us);
    if (c->tokens_in >= 0)
        fo_json_add_int(o, "tokens_in", c->tokens_in);
    if (c->tokens_out >= 0)
        fo_json_add_int(o, "tokens_out", c->tokens_out);
    if (c->attempts) {
        try_record(c);
        cJSON_AddItemToObject(o, "attempts", c->attempts);
        c->attempts = NULL;
    }
    /* what the client sent and was given; a translated call's exchange
     * with the provider by its hashes */
    const struct fo_buf *rx = c->xlate ? &c->tx : &c->raw;
    add_sha(o, "request_sha256", c->body, c->body_len);
    add_guarded(c->g, o, found, "request", c->body, c->body_len);
    add_sha(o, "response_sha256", rx->data, rx->len);
    fo_json_add_int(o, "response_bytes", (long long)rx->len);
    if (c->xlate)
        add_sha(o, "upstream_request_sha256", c->up_body, c->up_body_len);
    if (c->rescued)
        cJSON_AddStringToObject(o, "upstream_response_sha256", c->orig_sha);
    else if (c->xlate)
        add_sha(o, "upstream_response_sha256", c->raw.data, c->raw.len);
    if (c->forge_key || c->p->gateway_forge)
        cJSON_AddBoolToObject(o, "forge", 1);
    if (c->rescued) {
        cJSON_AddItemToObject(o, "rescued", c->rescued);
        c->rescued = NULL;
    }
    if (c->started && c->text_cut)
        cJSON_AddStringToObject(o, "response_text_omitted", "over 256 KiB");
    else if (c->started)
        add_guarded(c->g, o, found, "response_text", c->text.data, c->text.len);
    else
        add_guarded(c->g, o, found, "response", rx->data, rx->len);
    cJSON_AddItemToObject(o, "guard", found);
    struct fo_err err;
    fo_buf_init(&c->entry, LEDGER_BODY_MAX_DEFAULT);
    int rc = fo_json_canon(o, &c->entry, &err);
    cJSON_Delete(o);
    return rc;
}

/* ---- the end of a call ------------------------------------------------- */

static void call_free(struct gw_call *c)
{
    if (c->key[0]) /* the key's call is over: counted when witnessed */
        keys_done(keys_by_name(c->g->cfg.keys, c->key, c->key_created),
                  c->witnessed,
                  (c->tokens_in > 0 ? c->tokens_in : 0) +
                      (c->tokens_out > 0 ? c->tokens_out : 0));
    if (c->back)
        event_free(c->back);
    httpc_url_release(&c->url);
    httpc_sse_release(&c->sse);
    if (c->ssebuf)
        evbuffer_free(c->ssebuf);
    if (c->held)
        evbuffer_free(c->held);
    fo_buf_release(&c->raw);
    fo_buf_release(&c->text);
    fo_buf_release(&c->entry);
    fo_buf_release(&c->tx);
    fo_buf_release(&c->gout);
    cJSON_Delete(c->attempts);
    cJSON_Delete(c->req_json);
    cJSON_Delete(c->forge_tools);
    cJSON_Delete(c->rescued);
    free(c->up_body);
    free(c->body);
    free(c);
}

/* Loop thread, after the committer answered: the client has its answer. */
static void answer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct gw_call *c = arg;
    c->witnessed = c->commit_rc == FO_OK;
    if (!c->gone)
        surf_http_on_gone(c->h, c->req, NULL, NULL);
    if (c->gone) {
        /* nobody to answer: the request is freed (or went with its
         * connection) and counted as over */
        surf_http_stream_end(c->h, c->req_lost ? NULL : c->req);
    } else if (c->started) {
        if (c->commit_rc == FO_OK) {
            surf_http_stream_chunk(c->req, c->held);
        } else {
            struct evbuffer *b = evbuffer_new();
            if (b) {
                evbuffer_add_printf(
                    b, "event: error\ndata: {\"error\":{\"type\":"
                       "\"api_error\",\"message\":\"the call could not be "
                       "witnessed\"}}\n\n");
                surf_http_stream_chunk(c->req, b);
                evbuffer_free(b);
            }
        }
        surf_http_stream_end(c->h, c->req);
    } else if (c->commit_rc != FO_OK) {
        reply_error(c->h, c->req, c->api, 503, "api_error",
                    "the call could not be witnessed in the ledger; the "
                    "answer is withheld",
                    c->t0);
    } else if (c->error_class && (!c->status || c->bad_answer)) {
        int st = !strcmp(c->error_class, "timeout") ? 504 : 502;
        reply_error(c->h, c->req, c->api, st, "api_error", c->error, c->t0);
    } else {
        size_t len = 0;
        char *body = fo_buf_detach(c->xlate ? &c->tx : &c->raw, &len);
        surf_http_reply(c->h, c->req, c->status,
                        c->ctype[0] && !c->xlate ? c->ctype
                                                 : "application/json",
                        body, len, c->t0);
    }
    call_free(c);
}

/* Committer thread. */
static void committed(struct ledger_queued_append *r)
{
    struct gw_call *c = r->arg;
    c->commit_rc = r->a.rc;
    event_active(c->back, 0, 1);
}

static void witness(struct gw_call *c)
{
    struct fo_err err;
    c->commit_rc = entry_make(c);
    if (c->commit_rc == FO_OK) {
        c->creq.a = (struct ledger_append){.actor = "gateway",
                                           .kind = "gateway_call",
                                           .parent = LEDGER_NO_PARENT,
                                           .body = c->entry.data,
                                           .body_len = c->entry.len};
        c->creq.done = committed;
        c->creq.arg = c;
        if (c->g->cfg.append_submit)
            c->commit_rc =
                c->g->cfg.append_submit(c->g->cfg.append_hook, &c->creq, &err);
        else
            c->commit_rc = FO_E_UNAVAILABLE;
        if (c->commit_rc == FO_OK)
            return; /* committed() wakes answer() */
    }
    answer(-1, 0, c);
}

/* ---- the upstream ------------------------------------------------------ */

static void take_usage(struct gw_call *c, const cJSON *u)
{
    static const char *const in_keys[] = {"prompt_tokens", "input_tokens"};
    static const char *const out_keys[] = {"completion_tokens",
                                           "output_tokens"};
    for (int i = 0; u && i < 2; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(u, in_keys[i]);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(u, out_keys[i]);
        if (cJSON_IsNumber(a))
            c->tokens_in = (int64_t)a->valuedouble;
        if (cJSON_IsNumber(b))
            c->tokens_out = (int64_t)b->valuedouble;
    }
}

static void take_text(struct gw_call *c, const cJSON *s)
{
    if (!cJSON_IsString(s) || !s->valuestring[0])
        return;
    if (c->ttft_us < 0)
        c->ttft_us = ledger_now_us() - c->t_up;
    if (fo_buf_puts(&c->text, s->valuestring) != 0)
        c->text_cut = 1;
}

/* One SSE event of the upstream's stream: the text and usage it adds. */
static int on_event(void *arg, const char *type, const char *data, size_t len)
{
    struct gw_call *c = arg;
    cJSON *j = NULL;
    struct fo_err err;
    if (c->xlate) /* out of memory or over GW_RAW_MAX: the events dropped */
        (void)surf_gwa_stream_event(&c->gs, data, len, &c->gout);
    if (len == 6 && !memcmp(data, "[DONE]", 6))
        return 0;
    if (fo_json_parse(data, len, &j, &err) != FO_OK)
        return 0;
    if (c->api == GW_RESPONSES) {
        const char *t =
            cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "type"));
        if (t && !strcmp(t, "response.output_text.delta"))
            take_text(c, cJSON_GetObjectItemCaseSensitive(j, "delta"));
        take_usage(
            c, cJSON_GetObjectItemCaseSensitive(
                   cJSON_GetObjectItemCaseSensitive(j, "response"), "usage"));
    } else if (c->api == GW_CHAT || c->xlate) {
        const cJSON *ch = cJSON_GetArrayItem(
            cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(ch, "delta");
        take_text(c, cJSON_GetObjectItemCaseSensitive(d, "content"));
        take_usage(c, cJSON_GetObjectItemCaseSensitive(j, "usage"));
    } else {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "message");
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "delta");
        take_usage(c, cJSON_GetObjectItemCaseSensitive(m, "usage"));
        take_usage(c, cJSON_GetObjectItemCaseSensitive(j, "usage"));
        take_text(c, cJSON_GetObjectItemCaseSensitive(d, "text"));
    }
    if (!strcmp(type, "error") && !c->error_class) {
        c->error_class = "upstream_error";
        snprintf(c->error, sizeof(c->error),
                 "the provider sent an error "
                 "event");
    }
    cJSON_Delete(j);
    return 0;
}

/* Moves the stream's last event and what follows it (once it has come)
 * from data to c->held: the client has it only after the commit. */
static void hold_last(struct gw_call *c, struct evbuffer *data)
{
    if (evbuffer_get_length(c->held)) {
        evbuffer_add_buffer(c->held, data);
        return;
    }
    static const char *const marks[] = {"data: [DONE]", "event: message_stop",
                                        "event: response.completed"};
    const char *mark = marks[c->api];
    struct evbuffer_ptr at = evbuffer_search(data, mark, strlen(mark), NULL);
    if (at.pos < 0)
        return;
    struct evbuffer *head = evbuffer_new();
    if (!head)
        return; /* sent as it is */
    evbuffer_remove_buffer(data, head, (size_t)at.pos);
    evbuffer_add_buffer(c->held, data);
    evbuffer_add_buffer(data, head);
    evbuffer_free(head);
}

/* Sends the Anthropic events the translator made (c->gout) on, but for
 * the last, held until the commit. */
static void send_translated(struct gw_call *c)
{
    if (!c->gout.len)
        return;
    fo_buf_append(&c->tx, c->gout.data, c->gout.len);
    struct evbuffer *b = evbuffer_new();
    if (b && evbuffer_add(b, c->gout.data, c->gout.len) == 0) {
        hold_last(c, b);
        surf_http_stream_chunk(c->req, b);
    }
    if (b)
        evbuffer_free(b);
    fo_buf_reset(&c->gout);
}

/* The client hung up: the upstream request goes too, and what came of
 * it is witnessed as such. */
static void client_gone(void *arg)
{
    struct gw_call *c = arg;
    c->gone = 1;
    c->req_lost = evhttp_request_get_connection(c->req) != NULL;
    if (!c->up)
        return; /* witnessed already, waiting for the committer */
    httpc_req_cancel(c->up);
    c->up = NULL;
    c->error_class = "client_gone";
    snprintf(c->error, sizeof(c->error), "the client hung up");
    witness(c);
}

static void up_chunk(void *arg, struct httpc_req *r, struct evbuffer *data)
{
    struct gw_call *c = arg;
    if (httpc_req_status(r) != 200)
        return; /* an error answer comes whole to up_done */
    if (!evhttp_request_get_connection(c->req)) {
        /* the client hung up: the upstream request goes too */
        httpc_req_cancel(r);
        c->up = NULL;
        c->gone = 1;
        c->status = 200;
        c->error_class = "client_gone";
        snprintf(c->error, sizeof(c->error), "the client hung up mid-stream");
        witness(c);
        return;
    }
    if (!c->started) {
        const char *ct = httpc_req_header(r, "Content-Type");
        snprintf(c->ctype, sizeof(c->ctype), "%s",
                 ct && !c->xlate ? ct : "text/event-stream");
        surf_http_stream_start(c->h, c->req, 200, c->ctype, c->t0);
        c->started = 1;
        c->status = 200;
    }
    size_t len = evbuffer_get_length(data);
    const unsigned char *p = evbuffer_pullup(data, -1);
    if (len && p) {
        fo_buf_append(&c->raw, p, len); /* past GW_RAW_MAX: not kept */
        evbuffer_add(c->ssebuf, p, len);
        if (httpc_sse_feed(&c->sse, c->ssebuf, on_event, c) < 0)
            evbuffer_drain(c->ssebuf, evbuffer_get_length(c->ssebuf));
    }
    if (c->xlate) {
        /* the client has the Anthropic events made of what came */
        evbuffer_drain(data, evbuffer_get_length(data));
        send_translated(c);
        return;
    }
    hold_last(c, data);
    surf_http_stream_chunk(c->req, data);
    evbuffer_drain(data, evbuffer_get_length(data));
}

static const char *end_class(int end)
{
    switch (end) {
    case HTTPC_END_TIMEOUT:
    case HTTPC_END_CONNECT_TIMEOUT:
        return "timeout";
    case HTTPC_END_DNS:
    case HTTPC_END_CONNECT:
        return "unavailable";
    case HTTPC_END_CLOSED:
        return "upstream_closed";
    default:
        return "upstream_error";
    }
}

/* A failure before any byte went to the client, which the next provider
 * of the model may not have: no connection or no answer (status 0), a 5xx
 * or a 429. */
static int may_fall_over(const struct gw_call *c,
                         const struct httpc_result *res)
{
    if (c->started || c->gone || c->try_i + 1 >= c->n_cand)
        return 0;
    if (res->end == HTTPC_END_OK)
        return res->status >= 500 || res->status == 429;
    return res->status == 0;
}

/* The end of a translated call: a stream's last events, or the plain
 * answer (or the provider's error) in Anthropic's shape in c->tx. */
static void translate_end(struct gw_call *c, const struct httpc_result *res)
{
    if (c->started) {
        if (res->end == HTTPC_END_OK &&
            surf_gwa_stream_finish(&c->gs, &c->gout) == FO_OK)
            send_translated(c);
        return;
    }
    if (c->error_class && !c->status)
        return; /* answer() says it in Anthropic's shape */
    char *body = NULL;
    size_t len = 0;
    if (c->status >= 400) {
        if (surf_gwa_error_body(c->status, c->raw.data, c->raw.len, &body,
                                &len) == FO_OK)
            fo_buf_append(&c->tx, body, len);
        free(body);
        return;
    }
    cJSON *j = NULL, *m = NULL;
    struct fo_err err;
    const cJSON *stops =
        cJSON_GetObjectItemCaseSensitive(c->req_json, "stop_sequences");
    int rc =
        fo_json_parse(c->raw.data ? c->raw.data : "", c->raw.len, &j, &err);
    if (rc == FO_OK)
        rc = surf_gwa_response(j, c->model, stops, &m, &err);
    if (rc == FO_OK)
        rc = fo_json_canon(m, &c->tx, &err);
    cJSON_Delete(j);
    cJSON_Delete(m);
    if (rc) {
        c->error_class = "upstream_error";
        c->bad_answer = 1;
        snprintf(c->error, sizeof(c->error),
                 "the provider's answer is not a chat completion: %.150s",
                 err.msg);
    }
}

static int start_upstream(struct gw_call *c, struct fo_err *err);

/* A plain answer through the forge layer when it is on for the call:
 * tool calls written as text to the tools offered made real (c->raw
 * rewritten; the provider's own answer kept by its hash). */
static void forge_plain(struct gw_call *c)
{
    if (!(c->forge_key || c->p->gateway_forge) || !c->forge_tools ||
        c->status != 200)
        return;
    char *out = NULL;
    size_t len = 0;
    cJSON *forms = NULL;
    int rc = c->api == GW_ANTHROPIC && !c->xlate
                 ? surf_gwf_messages(c->raw.data, c->raw.len, c->forge_tools,
                                     &out, &len, &forms)
                 : surf_gwf_chat(c->raw.data, c->raw.len, c->forge_tools, &out,
                                 &len, &forms);
    struct fo_buf nb;
    fo_buf_init(&nb, GW_RAW_MAX);
    if (rc == 1 && fo_buf_append(&nb, out, len) == 0) {
        uint8_t d[FO_SHA256_LEN];
        fo_sha256(c->raw.data, c->raw.len, d);
        fo_hex(d, sizeof(d), c->orig_sha);
        fo_buf_release(&c->raw);
        c->raw = nb; /* what the client gets */
        fo_buf_init(&nb, GW_RAW_MAX);
        c->rescued = forms;
        forms = NULL;
    }
    fo_buf_release(&nb);
    free(out);
    cJSON_Delete(forms);
}

/* The URL of c->p, and for a translated call the chat request for it. */
static int prepare_try(struct gw_call *c, struct fo_err *err)
{
    httpc_url_release(&c->url);
    int rc = provider_url(c->p, c->xlate ? GW_CHAT : c->api, &c->url, err);
    if (rc || !c->xlate)
        return rc;
    cJSON *o = NULL;
    rc = surf_gwa_request(c->req_json, c->p->model, &o, err);
    if (rc)
        return rc;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    rc = fo_json_canon(o, &b, err);
    cJSON_Delete(o);
    free(c->up_body);
    c->up_body = rc ? NULL : fo_buf_detach(&b, &c->up_body_len);
    fo_buf_release(&b);
    if (!rc && !c->up_body)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    return rc;
}

/* Fallover: the try that failed is recorded, the next provider asked. */
static int next_try(struct gw_call *c)
{
    struct fo_err err;
    try_record(c);
    c->p = c->cand[++c->try_i];
    c->t_try = ledger_now_us();
    c->status = 0;
    c->error_class = NULL;
    c->error[0] = 0;
    c->ctype[0] = 0;
    c->tokens_in = c->tokens_out = -1;
    fo_buf_reset(&c->raw);
    int rc = prepare_try(c, &err);
    if (rc == FO_OK)
        rc = start_upstream(c, &err);
    if (rc) {
        c->error_class = "unavailable";
        snprintf(c->error, sizeof(c->error), "%s", err.msg);
    }
    return rc;
}

static void up_done(void *arg, struct httpc_result *res)
{
    struct gw_call *c = arg;
    c->up = NULL;
    if (res->status)
        c->status = res->status;
    size_t len = evbuffer_get_length(res->body);
    const unsigned char *p = evbuffer_pullup(res->body, -1);
    if (len && p && !c->started)
        fo_buf_append(&c->raw, p, len);
    if (!c->started && res->headers) {
        const char *ct = evhttp_find_header(res->headers, "Content-Type");
        snprintf(c->ctype, sizeof(c->ctype), "%s",
                 ct ? ct : "application/json");
    }
    if (res->end != HTTPC_END_OK) {
        c->error_class = end_class(res->end);
        snprintf(c->error, sizeof(c->error), "%s", res->err.msg);
        if (c->started) {
            /* mid-stream: a clean error event, then the end */
            struct evbuffer *b = evbuffer_new();
            if (b) {
                evbuffer_add_printf(
                    b, "event: error\ndata: {\"type\":\"error\",\"error\":{"
                       "\"type\":\"api_error\",\"message\":\"the provider's "
                       "stream broke off\"}}\n\n");
                surf_http_stream_chunk(c->req, b);
                evbuffer_free(b);
            }
        } else if (c->status) {
            c->status = 0; /* a broken answer is not given as it came */
        }
    } else if (c->status >= 400) {
        c->error_class = c->status == 429   ? "rate_limited"
                         : c->status >= 500 ? "upstream_5xx"
                                            : "upstream_4xx";
        snprintf(c->error, sizeof(c->error), "the provider answered %d",
                 c->status);
    } else if (!c->started) {
        cJSON *j = NULL;
        struct fo_err err;
        if (fo_json_parse(c->raw.data ? c->raw.data : "", c->raw.len, &j,
                          &err) == FO_OK)
            take_usage(c, cJSON_GetObjectItemCaseSensitive(j, "usage"));
        cJSON_Delete(j);
        forge_plain(c);
    }
    if (may_fall_over(c, res) && next_try(c) == FO_OK)
        return; /* the next provider's done comes here again */
    if (c->xlate)
        translate_end(c, res);
    witness(c);
}

/* ---- a call ------------------------------------------------------------ */

static int start_upstream(struct gw_call *c, struct fo_err *err)
{
    struct httpc_header hd[6];
    size_t n = 0;
    char auth[1024];
    hd[n++] = (struct httpc_header){"Content-Type", "application/json"};
    if (c->stream)
        hd[n++] = (struct httpc_header){"Accept", "text/event-stream"};
    const char *key = c->p->api_key_env ? getenv(c->p->api_key_env) : NULL;
    if (c->p->api_key_env && !key)
        return fo_err_set(err, FO_E_INVALID,
                          "the provider's key variable %s is not set",
                          c->p->api_key_env);
    struct evkeyvalq *ih = evhttp_request_get_input_headers(c->req);
    if (c->xlate || c->api != GW_ANTHROPIC) {
        if (key) {
            snprintf(auth, sizeof(auth), "Bearer %s", key);
            hd[n++] = (struct httpc_header){"Authorization", auth};
        }
    } else {
        const char *ver = evhttp_find_header(ih, "anthropic-version");
        const char *beta = evhttp_find_header(ih, "anthropic-beta");
        if (key)
            hd[n++] = (struct httpc_header){"x-api-key", key};
        hd[n++] = (struct httpc_header){"anthropic-version",
                                        ver ? ver : "2023-06-01"};
        if (beta)
            hd[n++] = (struct httpc_header){"anthropic-beta", beta};
    }
    const struct orch_model_config *mc = c->g->cfg.models;
    struct httpc_spec spec = {
        .method = HTTPC_POST,
        .url = &c->url,
        .headers = hd,
        .n_headers = n,
        .body = c->xlate ? c->up_body : c->body,
        .body_len = c->xlate ? c->up_body_len : c->body_len,
        .tls = c->g->tls,
        .pool = c->g->pool,
        .dns = c->g->cfg.dns,
        .connect_ms = mc->connect_timeout_ms ? mc->connect_timeout_ms
                                             : ORCH_MODEL_CONNECT_MS_DEFAULT,
        .timeout_ms = mc->timeout_ms ? mc->timeout_ms : ORCH_TIMEOUT_MS_DEFAULT,
        .body_max = mc->response_max ? mc->response_max
                                     : ORCH_MODEL_RESPONSE_MAX_DEFAULT,
        .on_chunk = c->stream ? up_chunk : NULL,
        .done = up_done,
        .arg = c};
    return httpc_req_start(c->g->cfg.base, &spec, &c->up, err);
}

/* Who calls: 1 with the daemon's token (already checked as a bearer:
 * authed), or as x-api-key; else 1 with a client key (*key set: as a
 * bearer or x-api-key, the key file reloaded first when it changed);
 * 0 when neither (*key set to a revoked key that was presented). */
static int key_ok(const struct surf_gateway *g, struct evhttp_request *req,
                  int authed, struct keys_key **key)
{
    struct evkeyvalq *ih = evhttp_request_get_input_headers(req);
    const char *k = evhttp_find_header(ih, "x-api-key");
    const char *t = g->cfg.token;
    *key = NULL;
    if (authed)
        return 1;
    if (k && t && t[0] && strlen(k) == strlen(t) &&
        CRYPTO_memcmp(k, t, strlen(t)) == 0)
        return 1;
    const char *a = evhttp_find_header(ih, "Authorization");
    const char *b = a && !strncasecmp(a, "Bearer ", 7) ? a + 7 : NULL;
    keys_refresh(g->cfg.keys);
    struct keys_key *hit = keys_find(g->cfg.keys, b ? b : k);
    if (!hit && b && k)
        hit = keys_find(g->cfg.keys, k);
    *key = hit;
    return hit && !hit->revoked_us;
}

/* A client key's limits on a call to model, served by p: 0 when it may go
 * (counted in flight), else answered (403 a model outside its list, 429
 * over its budget or rate, with Retry-After). */
static int key_limits(struct surf_http *h, struct evhttp_request *req, int api,
                      struct keys_key *key, const char *model,
                      const struct orch_model_provider *p, int64_t t0)
{
    char msg[KEYS_NAME_MAX + ORCH_MODEL_MAX + 128];
    if (!keys_model_ok(key, model, p->name, p->model)) {
        key->n403++;
        snprintf(msg, sizeof(msg), "the key %s may not call the model \"%.*s\"",
                 key->name, ORCH_MODEL_MAX, model);
        reply_error(h, req, api, 403, "permission_error", msg, t0);
        return 1;
    }
    long retry = 0;
    int why = keys_admit(key, ledger_now_us(), &retry);
    if (why == KEYS_OK)
        return 0;
    char ra[32];
    snprintf(ra, sizeof(ra), "%ld", retry);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After",
                      ra);
    snprintf(msg, sizeof(msg), "the key %s is over its %s", key->name,
             why == KEYS_OVER_CALLS    ? "budget of calls (--max-calls)"
             : why == KEYS_OVER_TOKENS ? "budget of tokens (--max-tokens)"
                                       : "rate (--rpm)");
    const char *type = api == GW_ANTHROPIC    ? "rate_limit_error"
                       : why == KEYS_OVER_RPM ? "rate_limit_exceeded"
                                              : "insufficient_quota";
    reply_error(h, req, api, 429, type, msg, t0);
    return 1;
}

/* A new call for the client's request j (kept by the call when it is
 * translated); NULL when out of memory. */
static struct gw_call *call_new(struct surf_gateway *g, struct surf_http *h,
                                struct evhttp_request *req, int api, int64_t t0,
                                cJSON *j, const char *text, size_t len)
{
    struct gw_call *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "stream");
    *c = (struct gw_call){.g = g,
                          .h = h,
                          .req = req,
                          .t0 = t0,
                          .t_up = ledger_now_us(),
                          .ttft_us = -1,
                          .api = api,
                          .stream = cJSON_IsTrue(st),
                          .tokens_in = -1,
                          .tokens_out = -1};
    c->t_try = c->t_up;
    snprintf(c->model, sizeof(c->model), "%s", m->valuestring);
    pick(c, m->valuestring);
    c->p = c->cand[0];
    fo_buf_init(&c->raw, GW_RAW_MAX);
    fo_buf_init(&c->text, GW_WITNESS_MAX + 1);
    fo_buf_init(&c->tx, GW_RAW_MAX);
    fo_buf_init(&c->gout, GW_RAW_MAX);
    httpc_sse_init(&c->sse, GW_SSE_EVENT_MAX);
    /* j stays with the call when it is translated (call_start) */
    surf_gwa_stream_init(
        &c->gs, c->model,
        c->xlate ? cJSON_GetObjectItemCaseSensitive(j, "stop_sequences")
                 : NULL);
    c->ssebuf = evbuffer_new();
    c->held = evbuffer_new();
    c->back = event_new(g->cfg.base, -1, 0, answer, c);
    c->body = malloc(len ? len : 1);
    if (c->body)
        memcpy(c->body, text, len);
    c->body_len = len;
    if (!c->ssebuf || !c->held || !c->back || !c->body) {
        call_free(c);
        return NULL;
    }
    return c;
}

static void call_start(struct surf_gateway *g, struct surf_http *h,
                       struct evhttp_request *req, int api,
                       struct keys_key *key, int64_t t0)
{
    struct fo_err err;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    const char *text = len ? (const char *)evbuffer_pullup(in, -1) : "";
    cJSON *j = NULL;
    if (!text || fo_json_parse(text, len, &j, &err) != FO_OK ||
        !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        reply_error(h, req, api, 400, "invalid_request_error",
                    "the body is not a JSON object", t0);
        return;
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (!cJSON_IsString(m)) {
        cJSON_Delete(j);
        reply_error(h, req, api, 400, "invalid_request_error",
                    "\"model\" is required", t0);
        return;
    }
    struct gw_call *c = call_new(g, h, req, api, t0, j, text, len);
    if (!c) {
        cJSON_Delete(j);
        reply_error(h, req, api, 500, "api_error", "out of memory", t0);
        return;
    }
    if (!c->n_cand) {
        char msg[ORCH_MODEL_MAX + 128];
        snprintf(msg, sizeof(msg),
                 "no provider serves the model \"%.*s\" here (GET "
                 "/v1/models)",
                 ORCH_MODEL_MAX, m->valuestring);
        cJSON_Delete(j);
        call_free(c);
        reply_error(h, req, api, 404, "not_found_error", msg, t0);
        return;
    }
    if (key && key_limits(h, req, api, key, m->valuestring, c->cand[0], t0)) {
        cJSON_Delete(j);
        call_free(c);
        return;
    }
    if (key) { /* admitted: counted in flight until call_free */
        snprintf(c->key, sizeof(c->key), "%s", key->name);
        c->key_created = key->created_us;
        c->forge_key = key->forge;
    }
    int forge = c->forge_key;
    for (int i = 0; i < c->n_cand; i++)
        forge |= c->cand[i]->gateway_forge;
    if (forge && api != GW_RESPONSES && !c->stream)
        c->forge_tools = surf_gwf_tools(j); /* kept for the forge layer */
    cJSON *tr = NULL;
    if (c->xlate && surf_gwa_request(j, "check", &tr, &err) != FO_OK) {
        cJSON_Delete(j);
        call_free(c);
        reply_error(h, req, api, 400, "invalid_request_error", err.msg, t0);
        return;
    }
    cJSON_Delete(tr);
    if (c->xlate)
        c->req_json = j; /* the stream translator borrows its stops */
    else
        cJSON_Delete(j);
    const char *sess = evhttp_find_header(evhttp_request_get_input_headers(req),
                                          "X-Forum-Session");
    if (sess && strlen(sess) <= GW_SESSION_MAX &&
        fo_utf8_valid(sess, strlen(sess)))
        snprintf(c->session, sizeof(c->session), "%s", sess);
    else if (key) /* a key's calls without a session header: one session */
        snprintf(c->session, sizeof(c->session), "key:%s", key->name);
    int rc = prepare_try(c, &err);
    if (rc == FO_OK)
        rc = start_upstream(c, &err);
    if (rc == FO_OK)
        surf_http_on_gone(h, req, client_gone, c);
    if (rc) {
        reply_error(h, req, api, 502, "api_error", err.msg, t0);
        call_free(c);
    }
}

/* GET /v1/models: each provider's model, then the tiers served. */
static void models(struct surf_gateway *g, struct surf_http *h,
                   struct evhttp_request *req, int64_t t0)
{
    const struct orch_model_config *mc = g->cfg.models;
    cJSON *o = cJSON_CreateObject(), *data = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToObject(o, "data", data);
    for (size_t i = 0; mc && i < mc->n_providers; i++) {
        const struct orch_model_provider *p = &mc->providers[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "id", p->model);
        cJSON_AddStringToObject(e, "object", "model");
        fo_json_add_int(e, "created", 0);
        cJSON_AddStringToObject(e, "owned_by", p->name ? p->name : "forum");
        cJSON_AddStringToObject(
            e, "api", p->api == ORCH_EXEC_ANTHROPIC ? "anthropic" : "chat");
        cJSON_AddItemToArray(data, e);
    }
    for (int t = ORCH_TIER_CHEAP; t <= ORCH_TIER_FRONTIER; t++) {
        int served = 0;
        for (size_t i = 0; mc && i < mc->n_providers; i++)
            served |= mc->providers[i].tier == t ||
                      mc->providers[i].tier == ORCH_TIER_ANY;
        if (!served)
            continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "id", orch_tier_name(t));
        cJSON_AddStringToObject(e, "object", "model");
        fo_json_add_int(e, "created", 0);
        cJSON_AddStringToObject(e, "owned_by", "forum-tier");
        cJSON_AddItemToArray(data, e);
    }
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    size_t len = 0;
    char *text =
        fo_json_canon(o, &b, &err) == FO_OK ? fo_buf_detach(&b, &len) : NULL;
    fo_buf_release(&b);
    cJSON_Delete(o);
    surf_http_reply(h, req, text ? 200 : 500, "application/json", text, len,
                    t0);
}

int surf_gateway_route(void *hook, struct surf_http *h,
                       struct evhttp_request *req, const char *path,
                       const char *verb, int authed, int64_t t0)
{
    struct surf_gateway *g = hook;
    int api;
    if (!strcmp(path, "/v1/chat/completions"))
        api = GW_CHAT;
    else if (!strcmp(path, "/v1/messages"))
        api = GW_ANTHROPIC;
    else if (!strcmp(path, "/v1/responses"))
        api = GW_RESPONSES;
    else if (!strcmp(path, "/v1/models"))
        api = -1;
    else
        return 0;
    int eapi = api < 0 ? GW_CHAT : api;
    struct keys_key *key = NULL;
    if (!key_ok(g, req, authed, &key)) {
        reply_error(h, req, eapi, 401, "authentication_error",
                    key ? "the key was revoked"
                        : "the daemon's token or a client key is needed "
                          "(Authorization: Bearer, or x-api-key)",
                    t0);
        return 1;
    }
    const char *want = api < 0 ? "GET" : "POST";
    if (strcmp(verb, want) != 0) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          want);
        reply_error(h, req, eapi, 405, "invalid_request_error",
                    api < 0 ? "use GET" : "use POST", t0);
        return 1;
    }
    if (api < 0)
        models(g, h, req, t0);
    else
        call_start(g, h, req, api, key, t0);
    return 1;
}

/* ---- lifecycle --------------------------------------------------------- */

int surf_gateway_create(const struct surf_gateway_config *cfg,
                        struct surf_gateway **out, struct fo_err *err)
{
    struct surf_gateway *g = calloc(1, sizeof(*g));
    if (!g)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    g->cfg = *cfg;
    int rc = httpc_tls_create(cfg->models ? cfg->models->ca_file : NULL,
                              &g->tls, err);
    if (rc == FO_OK)
        rc = httpc_pool_create(cfg->base, GW_POOL_IDLE, 0, &g->pool, err);
    if (rc) {
        surf_gateway_free(g);
        return rc;
    }
    if (cfg->token)
        rc = orch_guard_add_secret(&g->guard, cfg->token);
    const struct orch_model_config *mc = cfg->models;
    for (size_t i = 0; rc == FO_OK && mc && i < mc->n_providers; i++)
        rc = orch_guard_add_env(&g->guard, mc->providers[i].api_key_env);
    if (rc) {
        surf_gateway_free(g);
        return fo_err_set(err, rc, "the gateway's guardrails: %s",
                          rc == FO_E_NOMEM ? "out of memory" : "too many");
    }
    *out = g;
    return FO_OK;
}

int surf_gateway_metrics(const struct surf_gateway *g, struct fo_buf *out)
{
    if (!g || !g->cfg.keys)
        return 0;
    keys_refresh(g->cfg.keys); /* a key added since shows at once */
    return keys_metrics(g->cfg.keys, out);
}

void surf_gateway_free(struct surf_gateway *g)
{
    if (!g)
        return;
    httpc_pool_free(g->pool); /* before the TLS context its connections use */
    httpc_tls_free(g->tls);
    orch_guard_release(&g->guard);
    free(g);
}
