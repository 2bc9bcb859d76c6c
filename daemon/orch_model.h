/* orch_model: the model executors and the pure helpers the
 * control roles need: an HTTP(S) client for OpenAI-compatible chat
 * completions and the Anthropic Messages API with timeouts, retries and
 * fallover; lenient JSON extraction from model text; prompt templates;
 * machine-checkable done_when assertions. */
#ifndef ORCH_MODEL_H
#define ORCH_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "daemon/orch_types.h"
#include "ledger/fo_err.h"

/* ---- the model client --------------------------------------------------- */

#define ORCH_MODEL_PROVIDERS_MAX 32
#define ORCH_MODEL_URL_MAX 2048
#define ORCH_MODEL_CONNECT_MS_DEFAULT 10000
#define ORCH_MODEL_RESPONSE_MAX_DEFAULT (4u * 1024u * 1024u)
#define ORCH_MODEL_ATTEMPTS_DEFAULT 3
#define ORCH_MODEL_ATTEMPTS_MAX 10
#define ORCH_MODEL_BACKOFF_MS_DEFAULT 500
#define ORCH_MODEL_BACKOFF_MAX_MS_DEFAULT 8000
#define ORCH_MODEL_MAX_TOKENS_DEFAULT 1024
#define ORCH_TIER_ANY (-1) /* a provider that serves every tier */

/* One configured model endpoint. */
struct orch_model_provider {
    const char *name; /* a label in results and errors; NULL: the model */
    int api;          /* ORCH_EXEC_CHAT or ORCH_EXEC_ANTHROPIC */
    /* http:// or https:// URL. chat: a URL ending in /chat/completions is
     * used as is, one ending in /v1 gets /chat/completions, any other gets
     * /v1/chat/completions. anthropic: the same with /v1/messages; NULL
     * means https://api.anthropic.com. */
    const char *url;
    const char *model;       /* the model asked for; required */
    const char *api_key_env; /* the NAME of the environment variable that
                                holds the key; NULL: no key is sent */
    int tier;                /* enum orch_tier, or ORCH_TIER_ANY */
    int max_tokens;          /* anthropic; 0: ORCH_MODEL_MAX_TOKENS_DEFAULT */
    /* the tool loop's forge layer (struct orch_forge); zero: defaults */
    int no_rescue;       /* 1: "rescue": false */
    int respond_tool;    /* 1: "respond_tool": true */
    int malformed_tries; /* "malformed_retries" + 1; 0: the default */
    /* 1: "gateway_forge": true: the gateway rescues tool calls written as
     * text in this provider's plain answers (docs/GATEWAY.md) */
    int gateway_forge;
};

/* What forum's own tool loop does for a provider's small-model habits
 * (docs/AGENTS.md, "The forge layer"). */
#define ORCH_MALFORMED_RETRIES_DEFAULT 2
#define ORCH_MALFORMED_RETRIES_MAX 20
struct orch_forge {
    int rescue;            /* tool calls written as text become calls */
    int respond_tool;      /* the synthetic respond tool is offered */
    int malformed_retries; /* malformed calls in a row answered with the
                              reason before the task fails */
};

/* The Anthropic model and key variable used when the user names none. */
#define ORCH_ANTHROPIC_MODEL_DEFAULT "claude-sonnet-4-5"
#define ORCH_ANTHROPIC_KEY_ENV_DEFAULT "ANTHROPIC_API_KEY"

struct orch_model_config {
    const struct orch_model_provider *providers; /* in fallover order */
    size_t n_providers;
    int connect_timeout_ms; /* TCP connect, per request; 0: default 10 s */
    int timeout_ms;         /* the whole call with its retries, backoff and
                               fallover; 0: ORCH_TIMEOUT_MS_DEFAULT */
    size_t response_max;    /* body bytes; 0: 4 MiB */
    int attempts;           /* requests per provider; 0: 3 */
    int backoff_ms;         /* first retry delay, doubled each time; 0: 500 */
    int backoff_max_ms;     /* cap of one delay; 0: 8000 */
    int fallover; /* 1: after a provider's retriable failures, the next
                     provider that serves the tier is tried */
    /* PEM file of trusted CAs instead of the system store (tests, private
     * CAs); NULL: the system store. Peers are always verified. */
    const char *ca_file;
};

/* A client: the providers (copied) and the TLS context. Immutable once
 * created, so several threads may call with one client at the same time,
 * and any number of calls may be in flight on one or several bases. */
struct orch_model;

/* Checks and copies cfg, loads the CA store. Errors: FO_E_INVALID naming
 * the provider and field (no model, a bad URL or api, a bad tier, a limit
 * out of range), FO_E_IO (the CA store cannot be loaded), FO_E_NOMEM. The
 * API key variables are read at each call, never here. */
int orch_model_create(const struct orch_model_config *cfg,
                      struct orch_model **out, struct fo_err *err);

/* NULL-safe. */
void orch_model_free(struct orch_model *m);

/* Parses the "models" object of forum.json into a config:
 * {"providers": [{"name"?, "api": "chat"|"anthropic", "url"?, "model",
 * "api_key_env"?, "tier"?: "cheap"|"capable"|"frontier"|"any",
 * "max_tokens"?, "rescue"?: bool, "respond_tool"?: bool,
 * "malformed_retries"?: 0..ORCH_MALFORMED_RETRIES_MAX}], "connect_timeout_ms"?,
 * "timeout_ms"?, "response_max"?, "attempts"?, "backoff_ms"?,
 * "backoff_max_ms"?, "fallover"?, "ca_file"?}. The strings point into j, which
 * must outlive cfg; cfg->providers is malloc'd (free it). FO_E_INVALID naming
 * the field. */
int orch_model_config_parse(const cJSON *j, struct orch_model_config *cfg,
                            struct orch_model_provider **providers,
                            struct fo_err *err);

/* One message of a conversation. role: "system", "user", "assistant" or
 * "tool". For Anthropic, system messages become the top-level "system"
 * text, and tool messages user messages of tool_result blocks (consecutive
 * ones merged into one). */
struct orch_model_msg {
    const char *role;
    const char *content; /* "" allowed for an assistant making tool calls */
    /* assistant: the tool calls it made, a JSON array of {"id", "name",
     * "arguments"}, arguments being the JSON text as the model wrote it
     * (it may not parse); NULL: none */
    const char *tool_calls;
    const char *tool_call_id; /* tool: the call this answers */
    int is_error;             /* tool: the call failed */
};

/* What a call did. Filled on success and on failure (text NULL then), so a
 * failed call still says which model and how many requests. */
struct orch_model_reply {
    char *text; /* the answer, malloc'd valid UTF-8; NULL on failure */
    size_t text_len;
    /* the tools the model asked to call, as orch_model_msg.tool_calls
     * (malloc'd); NULL when it called none. text is then what it said
     * alongside, often "". */
    char *tool_calls;
    char model[ORCH_MODEL_MAX + 1];   /* reported by the server, else asked */
    char provider[ORCH_NAME_MAX + 1]; /* the provider that answered last */
    int api;                          /* its api */
    int http_status;                  /* of the last response, 0 when none */
    int attempts;                     /* requests made, over all providers */
    int retriable; /* on failure: the last error was of the retriable kind */
    /* tokens the server says the answer took (its usage object): prompt
     * or input, completion or output; -1 when it did not say */
    int64_t tokens_in, tokens_out;
    int64_t elapsed_us;
};

void orch_model_reply_release(struct orch_model_reply *r);

/* The forge options of the provider named provider (rep->provider of a
 * reply), or, provider NULL or not found, of the first provider a call
 * for api and tier asks (orch_model_call's order); the defaults (rescue
 * on, no respond tool, ORCH_MALFORMED_RETRIES_DEFAULT) when m is NULL or
 * no provider serves them. */
void orch_model_forge(const struct orch_model *m, int api, int tier,
                      const char *provider, struct orch_forge *out);

/* The providers of m (0 for NULL), and provider i's URL as it is called
 * (scheme, host and port, path), for people: FO_E_NOT_FOUND past the
 * last. */
size_t orch_model_providers(const struct orch_model *m);

/* Calls made on base (the daemon's loop) take keep-alive connections
 * from pool (httpc.h); calls on any other base make their own. Set once,
 * before the first call; pool NULL to stop. NULL-safe for m. */
struct event_base;
struct httpc_pool;
void orch_model_set_pool(struct orch_model *m, struct event_base *base,
                         struct httpc_pool *pool);
int orch_model_provider_url(const struct orch_model *m, size_t i, char *url,
                            size_t cap);

/* One short call to provider i alone (one attempt, no fallover, at most
 * timeout_ms; 0: the client's deadline): whether it answers, as
 * orch_model_call reports it. Blocks. */
int orch_model_probe(const struct orch_model *m, size_t i, int timeout_ms,
                     struct orch_model_reply *out, struct fo_err *err);

/* Asks a model. The candidates are the providers whose api matches (api
 * ORCH_EXEC_DEFAULT: any) and whose tier is tier, then those with
 * ORCH_TIER_ANY, in configuration order; without fallover only the first
 * is asked. Each request POSTs JSON over a fresh connection. This is
 * orch_model_call_start run to its end on a private event_base (with a
 * resolver of its own when a provider's host is a name), so it runs on any
 * thread and blocks it until the answer, the failure or the deadline.
 *
 * Retriable failures (cannot connect, connect or read timeout, a dropped
 * connection, 429, 5xx) are retried up to attempts times per provider with
 * exponential backoff (backoff_ms, doubling, at most backoff_max_ms; a
 * Retry-After of a few seconds is honoured within the cap); the whole call
 * never outlives timeout_ms. Non-retriable failures end the call at once:
 * 400, 401, 403 and other 4xx, a body that is not the API's JSON shape, a
 * body over response_max, a TLS certificate or host name that does not
 * verify, a missing API key variable.
 *
 * Returns FO_OK (out->text set), FO_E_TIMEOUT (the deadline passed),
 * FO_E_UNAVAILABLE (retriable failures exhausted), FO_E_UPSTREAM (a
 * non-retriable answer: 4xx, bad shape, oversize, TLS), FO_E_INVALID (no
 * provider for api and tier, bad messages, a missing key variable),
 * FO_E_NOMEM. The API key is sent in a header and appears in no error,
 * reply or log. Release out with orch_model_reply_release either way. */
int orch_model_call(const struct orch_model *m, int api, int tier,
                    const struct orch_model_msg *msgs, size_t n_msgs,
                    struct orch_model_reply *out, struct fo_err *err);

/* ---- the model client, asynchronous ------------------------------------ */

struct event_base; /* libevent's, event2/event.h */
struct evdns_base; /* libevent's, event2/dns.h */
/* One call in flight on an event_base. */
struct orch_model_call;

/* How a call ends. Called exactly once per started call, on the base's
 * thread from its loop, never from inside orch_model_call_start. rep is
 * filled as orch_model_call fills out; it belongs to the call, which
 * releases it when done returns, so done may keep the answer by taking
 * rep->text and setting it NULL. rc and err are what orch_model_call
 * returns and writes (err->msg says what failed when rc is not FO_OK).
 * done may start calls and cancel others on the base; the call's own
 * handle is gone once done returns. */
typedef void (*orch_model_done_fn)(void *arg, int rc,
                                   struct orch_model_reply *rep,
                                   const struct fo_err *err);

/* Starts the call orch_model_call makes, on base, and returns at once. The
 * host name lookup, connect, TLS, request, retries, backoff (timers, never
 * a sleep), fallover and the deadline are all events on base: nothing
 * blocks and no thread is made, so thousands of calls may be in flight on
 * one base. Call it on the thread that runs base (or before the loop
 * runs). The deadline (timeout_ms) counts from here. msgs are copied; m
 * and base must outlive the call (cancel calls before freeing base). The
 * API key variable is read as each provider is tried.
 *
 * dns looks up host names (httpc_dns_create makes one for base). It
 * may be NULL when every provider the call may ask is an IP literal or
 * "localhost", which is always 127.0.0.1 without a lookup (RFC 6761; local
 * model servers listen there; write [::1] for IPv6).
 *
 * Memory per call in flight, measured (glibc, 200 calls on one base): about
 * 5 KiB for a plain http call waiting for its answer, plus the request body
 * (once; the messages a second time only while fallover may need them),
 * plus the response as it arrives (at most response_max, and a copy of it
 * for a moment when it is complete). https adds about 20 KiB of OpenSSL 3.0
 * session, and about 25 KiB more when the server sends TLS 1.3 session
 * tickets (OpenSSL keeps its handshake buffers after reading them); record
 * buffers are given back while idle. One socket each (two while connecting).
 *
 * On FO_OK the call is in flight: done will be called once unless the
 * call is cancelled first, and *out (out may be NULL) is its handle until
 * then. Errors returned here mean nothing started and done will not be
 * called: FO_E_INVALID (m, base or done NULL; no messages; a message
 * without role system, user or assistant or whose content is not UTF-8;
 * no provider for api and tier; a host name to look up and dns NULL),
 * FO_E_NOMEM. Every other outcome, a missing API key variable included,
 * comes to done. */
int orch_model_call_start(const struct orch_model *m, struct event_base *base,
                          struct evdns_base *dns, int api, int tier,
                          const struct orch_model_msg *msgs, size_t n_msgs,
                          orch_model_done_fn done, void *arg,
                          struct orch_model_call **out, struct fo_err *err);

/* As orch_model_call_start, offering the model tools: a JSON array text
 * of {"name", "description", "input_schema"} (NULL or "[]": no tools),
 * sent as OpenAI "tools" of type function or Anthropic "tools". A reply
 * that calls tools fills rep->tool_calls. FO_E_INVALID when tools is not
 * such an array. */
int orch_model_call_tools_start(const struct orch_model *m,
                                struct event_base *base, struct evdns_base *dns,
                                int api, int tier, const char *tools,
                                const struct orch_model_msg *msgs,
                                size_t n_msgs, orch_model_done_fn done,
                                void *arg, struct orch_model_call **out,
                                struct fo_err *err);

/* The names tools are offered under (orch_toolname.c). OpenAI and
 * Anthropic take only ^[a-zA-Z0-9_-]{1,64}$: a tool whose roster name is
 * not such ("server.tool") is offered as one that is ("server__tool"; a
 * short hash of the name added on a clash), and a call of that name is
 * mapped back, so rep->tool_calls and everything after keep the roster's
 * name. The mapping depends only on the list of tools offered. */
#define ORCH_TOOLNAME_MAX 64
struct orch_toolnames;
/* 1 when s is a name providers accept as it is. */
int orch_toolname_valid(const char *s);
/* The mapping for tools (orch_model_call_tools_start's array text; NULL:
 * none). FO_OK or FO_E_NOMEM. */
int orch_toolnames_make(const char *tools, struct orch_toolnames **out);
/* The provider's name for roster name `name` (a name not offered, one the
 * model made up and the history repeats, made valid the same way; valid
 * until the next call), and the roster's name for a provider's (wire
 * itself when not offered). */
const char *orch_toolnames_wire(struct orch_toolnames *t, const char *name);
const char *orch_toolnames_name(const struct orch_toolnames *t,
                                const char *wire);
void orch_toolnames_free(struct orch_toolnames *t);

/* Ends a call in flight at once: closes its connection, cancels its
 * lookup and timers, frees it; done is not called. Safe from any callback
 * on the base's thread; inside the call's own done it does nothing.
 * NULL-safe. A lookup it cancels is answered by evdns on the base's next
 * loop iteration: run the loop once more before freeing dns. */
void orch_model_call_cancel(struct orch_model_call *c);

/* A resolver for orch_model_call_start on base: httpc_dns_create
 * (daemon/httpc.h), under the model client's name for its callers. */
int orch_model_dns_create(struct event_base *base, struct evdns_base **out,
                          struct fo_err *err);

/* ---- lenient JSON from model text -------------------------------------- */

/* Finds the JSON object a model meant in text (len bytes), trying in
 * order: the whole text; each ```json (or bare ```) fenced block; the
 * first balanced {...} in the prose (braces inside strings and escapes do
 * not count). Each candidate is parsed strictly (fo_json_parse); when that
 * fails, one repair is tried: // and / * * / comments outside strings
 * removed and commas before } or ] dropped. Only an object is accepted.
 * On FO_OK *out is the object (cJSON_Delete it). Else FO_E_JSON with a
 * message saying what was wrong, fit to put in a corrective prompt ("no
 * JSON object found", "unbalanced braces: the object is not closed", the
 * parser's message). Text over 1 MiB is FO_E_INVALID. */
int orch_json_extract(const char *text, size_t len, cJSON **out,
                      struct fo_err *err);

/* ---- prompt templates -------------------------------------------------- */

struct orch_tmpl_var {
    const char *name;
    const char *value;
};

/* Substitutes each {{name}} in tmpl (names: [a-z0-9_]+, no spaces) with
 * its value in one pass from left to right: a value is copied verbatim and
 * never scanned again, so a value holding "{{x}}" stays literal. "{{" not
 * followed by a name and "}}" is literal text. An unknown name is
 * FO_E_INVALID naming it. *out is malloc'd (free it), output at most
 * max bytes (0: unlimited) or FO_E_TOO_LARGE. */
int orch_template_render(const char *tmpl, const struct orch_tmpl_var *vars,
                         size_t n_vars, size_t max, char **out,
                         struct fo_err *err);

/* ---- done_when assertions ---------------------------------------------- */

#define ORCH_REGEX_MAX 1024 /* bytes of one regex */
#define ORCH_ASSERT_MAX 64  /* items of one done_when */

struct orch_verdict {
    int pass;         /* every assertion held (needs_validator aside) */
    cJSON *failed;    /* array of strings, one per failed assertion */
    cJSON *validator; /* array of the plain-text items a model must judge */
};

void orch_verdict_release(struct orch_verdict *v);

/* Checks output (len bytes) and exit_code against done_when: an array
 * (or one item) of plain strings (for the validator) and assertion objects
 * of exactly one member: {"contains": s}, {"not_contains": s}, {"regex":
 * r} (POSIX ERE, at most ORCH_REGEX_MAX bytes, matched against the output
 * up to its first NUL), {"json": true} (orch_json_extract finds an object;
 * false: it must not), {"max_words": n} (blank-separated words),
 * {"exit_code": n}. Each failure is described in one line ("contains
 * \"ok\": not found in the output"). A malformed item (unknown key, wrong
 * type, a regex that does not compile) is FO_E_INVALID naming it, and
 * nothing is judged. done_when NULL passes (the engine calls a task
 * without criteria unjudged); an empty array does not: no criteria is not
 * a pass. */
int orch_assert_check(const cJSON *done_when, const char *output, size_t len,
                      int exit_code, struct orch_verdict *out,
                      struct fo_err *err);

#endif
