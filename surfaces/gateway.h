/* gateway: the daemon between any agent and its model. POST
 * /v1/chat/completions (OpenAI-compatible, plain and stream: true), POST
 * /v1/responses (passed through to a chat provider), POST /v1/messages
 * (Anthropic Messages, forwarded to an Anthropic provider, else translated
 * for a chat one: gateway_anthropic.h) and GET /v1/models, authenticated
 * with the daemon's token (a bearer, or x-api-key). A request goes to the
 * provider its "model" names (a provider's model or name, or a tier) as
 * the client sent it, the next such provider when one fails before the
 * client had a byte (fallover, at most 3); the answer comes back as the
 * provider gave it, a stream relayed chunk by chunk.
 * Every call that reached a provider is one ledger entry of kind
 * gateway_call (request and response as witnessed, with the guardrails
 * applied to that copy only), committed through the group committer
 * before the client has its answer (a stream's end). docs/GATEWAY.md. */
#ifndef SURF_GATEWAY_H
#define SURF_GATEWAY_H

#include <stdint.h>

#include <event2/http.h>

#include "daemon/orch_model.h"
#include "ledger/ledger.h"
#include "surfaces/http.h"

struct evdns_base;
struct keys;

struct surf_gateway_config {
    struct event_base *base;                /* the HTTP surface's loop */
    struct evdns_base *dns;                 /* host names of providers */
    const struct orch_model_config *models; /* NULL: no provider */
    const char *token;                      /* the daemon's bearer token */
    struct keys *keys; /* the client keys (daemon/keys.h); NULL: none */
    int no_auth;
    /* the group committer (as surf_http_config.append_submit) */
    int (*append_submit)(void *hook, struct ledger_queued_append *r,
                         struct fo_err *err);
    void *append_hook;
};

struct surf_gateway;

/* Copies nothing: cfg's strings and models outlive the gateway. Makes the
 * TLS context and the guardrails (the token and each provider's key
 * variable's value are looked for). FO_E_IO, FO_E_NOMEM. */
int surf_gateway_create(const struct surf_gateway_config *cfg,
                        struct surf_gateway **out, struct fo_err *err);
/* The client keys' lines of GET /metrics (keys_metrics), appended to
 * out. Loop thread. */
int surf_gateway_metrics(const struct surf_gateway *g, struct fo_buf *out);

/* After the HTTP surface drained (no call in flight). NULL-safe. */
void surf_gateway_free(struct surf_gateway *g);

/* The extra route (surf_http_config.extra): 1 when path is the
 * gateway's (answered, now or later), 0 otherwise. */
int surf_gateway_route(void *hook, struct surf_http *h,
                       struct evhttp_request *req, const char *path,
                       const char *verb, int authed, int64_t t0);

#endif
