/* http_mcp: MCP over Streamable HTTP at /mcp, on the daemon's own loop,
 * engine and handler table: the same tools as `forum mcp` over stdio, with
 * the daemon's models, tools, sandbox and runs.
 *
 * POST /mcp carries one JSON-RPC message. `initialize` opens a session
 * (Mcp-Session-Id in the reply; every later message names it: 400 without,
 * 404 for one that is gone); a notification or a response is 202. A
 * request is answered with one JSON reply, or, when the call reports steps
 * and the client accepts `text/event-stream`, with a stream: each step of
 * the run as `notifications/progress` (when the call carried a
 * progressToken), an `elicitation/create` for each gate the run waits at
 * (when the client can be asked), then the result, and the stream ends.
 * Run methods (submit, plan, plan_run, run_start, gate_*) go to the engine
 * and hold no thread while they run; the rest run where their row says
 * (a worker, the loop), as over HTTP.
 *
 * `notifications/cancelled` cancels the call's run through the engine
 * (witnessed; its result is not sent). A client that hangs up does not
 * cancel (the specification says disconnection is not cancellation): the
 * run goes on and stays in GET /runs. GET /mcp opens the session's stream
 * for messages sent outside a request's answer: an elicitation for a gate
 * whose call's client hung up goes there (one stream a session; a comment
 * every 15 s keeps it open). DELETE /mcp ends the session and its stream
 * (its runs go on). The bearer token is needed as on every
 * route; admin tools only with it, also under --no-auth. */
#include "surfaces/http_int.h"

#include <openssl/rand.h>

#include "daemon/orch.h"
#include "daemon/orch_engine.h"
#include "surfaces/mcp_proto.h"
#include "surfaces/mcp_res.h"

#define SESSIONS_MAX 256
#define SESSION_IDLE_US (24LL * 3600 * 1000000) /* then it may be dropped */
#define CALLS_MAX 64                            /* run calls a session holds */

struct hm_elicit {
    char id[40];
    int64_t run, wave;
    struct hm_elicit *next;
};

struct hm_sess;

/* A tools/call on the run engine, parked until its reply. */
struct hm_call {
    struct surf_http *h;
    struct hm_sess *s; /* NULL once the session was deleted */
    struct evhttp_request *req;
    int64_t t0;
    cJSON *id, *params, *token;
    int64_t run, gate;
    int sse;       /* the stream has begun */
    int gone;      /* the client hung up */
    int lost;      /* and the connection freed the request */
    int cancelled; /* notifications/cancelled came: no result */
    int json_only; /* its Accept has no text/event-stream: no steps */
    struct hm_call *next;
};

struct hm_sess {
    char id[33];
    struct surf_http *h;
    struct evhttp_request *get; /* its GET stream, or NULL */
    int64_t get_t0;
    struct event *beat; /* the GET stream's keep-alive */
    struct mcp_peer peer;
    unsigned flags; /* SURF_MCP_ADMIN when it began with the token */
    int64_t last_us;
    struct hm_call *calls;
    int ncalls;
    struct hm_elicit *elicits;
    unsigned long elicit_n;
    struct hm_sess *next;
};

struct http_mcp {
    struct hm_sess *sessions;
    int n;
};

static void get_end(struct hm_sess *s);
static int get_send(struct hm_sess *s, const char *text, size_t len);

static void sess_free(struct hm_sess *s)
{
    get_end(s);
    if (s->beat)
        event_free(s->beat);
    for (struct hm_call *c = s->calls; c; c = c->next)
        c->s = NULL;
    while (s->elicits) {
        struct hm_elicit *e = s->elicits;
        s->elicits = e->next;
        free(e);
    }
    free(s);
}

void http_mcp_drain(struct surf_http *h)
{
    for (struct hm_sess *s = h->mcp ? h->mcp->sessions : NULL; s; s = s->next)
        get_end(s);
}

void http_mcp_free(struct surf_http *h)
{
    if (!h->mcp)
        return;
    while (h->mcp->sessions) {
        struct hm_sess *s = h->mcp->sessions;
        h->mcp->sessions = s->next;
        sess_free(s);
    }
    free(h->mcp);
    h->mcp = NULL;
}

static struct hm_sess *sess_find(struct surf_http *h, const char *id)
{
    for (struct hm_sess *s = h->mcp ? h->mcp->sessions : NULL; id && s;
         s = s->next)
        if (strcmp(s->id, id) == 0)
            return s;
    return NULL;
}

static void sess_unlink(struct surf_http *h, struct hm_sess *s)
{
    for (struct hm_sess **p = &h->mcp->sessions; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            h->mcp->n--;
            return;
        }
}

/* A new session; at the cap the longest idle one without calls goes, if it
 * has been idle for SESSION_IDLE_US. NULL when none can be made. */
static struct hm_sess *sess_new(struct surf_http *h)
{
    if (!h->mcp && !(h->mcp = calloc(1, sizeof(*h->mcp))))
        return NULL;
    if (h->mcp->n >= SESSIONS_MAX) {
        struct hm_sess *old = NULL;
        for (struct hm_sess *s = h->mcp->sessions; s; s = s->next)
            if (!s->calls && (!old || s->last_us < old->last_us))
                old = s;
        if (!old || ledger_now_us() - old->last_us < SESSION_IDLE_US)
            return NULL;
        sess_unlink(h, old);
        sess_free(old);
    }
    unsigned char rnd[16];
    struct hm_sess *s = calloc(1, sizeof(*s));
    if (!s || RAND_bytes(rnd, sizeof(rnd)) != 1) {
        free(s);
        return NULL;
    }
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(s->id + 2 * i, 3, "%02x", rnd[i]);
    s->last_us = ledger_now_us();
    s->h = h;
    s->next = h->mcp->sessions;
    h->mcp->sessions = s;
    h->mcp->n++;
    return s;
}

/* ---- replies ------------------------------------------------------------ */

/* A JSON reply (consumed; NULL: out of memory) with the session's id. */
static void send_json(struct surf_http *h, struct evhttp_request *req,
                      int status, cJSON *reply, const char *sid, int64_t t0)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    mcp_serialize(&b, reply, 1);
    cJSON_Delete(reply);
    if (sid)
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "Mcp-Session-Id", sid);
    size_t len = 0;
    char *text = fo_buf_detach(&b, &len);
    http_send_raw(h, req, status, "application/json", text, len, 0, ROUTE_MCP,
                  t0);
}

/* An error before any message is taken: a JSON-RPC error (id null) with
 * an HTTP status. */
static void send_refusal(struct surf_http *h, struct evhttp_request *req,
                         int status, int code, const char *msg, int64_t t0)
{
    send_json(h, req, status, mcp_rpc_error(NULL, code, "%s", msg), NULL, t0);
}

static void send_empty(struct surf_http *h, struct evhttp_request *req,
                       int status, int64_t t0)
{
    http_send_raw(h, req, status, "application/json", NULL, 0, 0, ROUTE_MCP,
                  t0);
}

/* Opens req's reply as an event stream for session sid (no read deadline
 * while it lasts: a run may wait longer than the idle timeout). */
static void sse_start(struct surf_http *h, struct evhttp_request *req,
                      const char *sid, int64_t t0)
{
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    evhttp_add_header(oh, "Content-Type", "text/event-stream");
    evhttp_add_header(oh, "Cache-Control", "no-store");
    evhttp_add_header(oh, "X-Accel-Buffering", "no");
    if (sid)
        evhttp_add_header(oh, "Mcp-Session-Id", sid);
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev =
        evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    if (bev)
        bufferevent_set_timeouts(bev, NULL, &h->deadline_plain);
    evhttp_send_reply_start(req, 200, NULL);
    http_count(h, ROUTE_MCP, 200, t0);
    http_access_line(h, req, 200, 0, ROUTE_MCP, t0);
}

/* msg (consumed) as one event of a stream, into t (reset first); 0 when
 * there is nothing to send. */
static size_t sse_frame(struct fo_buf *t, cJSON *msg)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    mcp_serialize(&b, msg, 0);
    cJSON_Delete(msg);
    fo_buf_reset(t);
    if (!b.len || fo_buf_printf(t, "event: message\ndata: %.*s\n\n", (int)b.len,
                                b.data) != FO_OK)
        t->len = 0;
    fo_buf_release(&b);
    return t->len;
}

/* One message on a call's stream, which begins with the first. */
static void push(struct hm_call *c, cJSON *msg)
{
    if (!msg)
        return;
    if (c->json_only) { /* the result alone, as JSON, at the end */
        cJSON_Delete(msg);
        return;
    }
    if (c->gone) {
        /* a request of ours (an elicitation) can still reach the client
         * on its session's stream; notifications about this call cannot */
        if (c->s && c->s->get && cJSON_GetObjectItemCaseSensitive(msg, "id")) {
            struct fo_buf t;
            fo_buf_init(&t, FO_BUF_UNLIMITED);
            if (sse_frame(&t, msg))
                get_send(c->s, t.data, t.len);
            fo_buf_release(&t);
            return;
        }
        cJSON_Delete(msg);
        return;
    }
    if (!c->sse) {
        sse_start(c->h, c->req, c->s ? c->s->id : NULL, c->t0);
        c->sse = 1;
    }
    struct fo_buf t;
    fo_buf_init(&t, FO_BUF_UNLIMITED);
    struct evbuffer *out = sse_frame(&t, msg) ? evbuffer_new() : NULL;
    if (out && evbuffer_add(out, t.data, t.len) == 0 &&
        evhttp_request_get_connection(c->req))
        evhttp_send_reply_chunk(c->req, out);
    if (out)
        evbuffer_free(out);
    fo_buf_release(&t);
}

/* ---- the session's GET stream ------------------------------------------ */

#define BEAT_S 15

static void get_gone(void *arg)
{
    struct hm_sess *s = arg;
    if (!s->get)
        return;
    if (s->beat)
        evtimer_del(s->beat);
    /* detached: the end frees it; still attached: the connection did */
    if (!evhttp_request_get_connection(s->get))
        evhttp_send_reply_end(s->get);
    s->get = NULL;
    http_finished(s->h);
}

/* Ends the stream (the session ends, or the daemon drains). */
static void get_end(struct hm_sess *s)
{
    if (!s->get)
        return;
    surf_http_on_gone(s->h, s->get, NULL, NULL);
    if (s->beat)
        evtimer_del(s->beat);
    evhttp_send_reply_end(s->get);
    s->get = NULL;
    http_finished(s->h);
}

static int get_send(struct hm_sess *s, const char *text, size_t len)
{
    if (!s->get || !evhttp_request_get_connection(s->get))
        return -1;
    struct evbuffer *out = evbuffer_new();
    if (!out)
        return -1;
    evbuffer_add(out, text, len);
    evhttp_send_reply_chunk(s->get, out);
    evbuffer_free(out);
    return 0;
}

static void beat(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct hm_sess *s = arg;
    static const char ka[] = ": keep-alive\n\n";
    if (get_send(s, ka, sizeof(ka) - 1) == 0) {
        struct timeval tv = {BEAT_S, 0};
        evtimer_add(s->beat, &tv);
    }
}

/* GET /mcp: the session's stream. 1 when open (in flight). */
static int get_open(struct surf_http *h, struct hm_sess *s,
                    struct evhttp_request *req, int64_t t0);

/* ---- run calls ---------------------------------------------------------- */

static void call_unlink(struct hm_call *c)
{
    if (!c->s)
        return;
    for (struct hm_call **p = &c->s->calls; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            c->s->ncalls--;
            break;
        }
}

static void call_free(struct hm_call *c)
{
    cJSON_Delete(c->id);
    cJSON_Delete(c->params);
    cJSON_Delete(c->token);
    free(c);
}

static void call_gone(void *arg)
{
    struct hm_call *c = arg;
    c->gone = 1;
    c->lost = evhttp_request_get_connection(c->req) != NULL;
}

/* A step of the call's run as the engine witnessed it (loop thread). */
static void call_event(void *arg, const struct orch_run_event *ev)
{
    struct hm_call *c = arg;
    struct orch_engine *e = c->h->cfg.loop_ctx->engine;
    if (c->run < 0 && c->cancelled && e)
        orch_engine_cancel(e, ev->run); /* cancelled before it was known */
    c->run = ev->run;
    if (c->cancelled || c->gone)
        return;
    if (c->token)
        push(c, mcp_progress(c->token, ev));
    struct hm_sess *s = c->s;
    if (!s || !s->peer.elicit_ok || strcmp(ev->kind, "gate_requested") != 0 ||
        c->gate == ev->seq)
        return;
    c->gate = ev->seq;
    struct hm_elicit *el = calloc(1, sizeof(*el));
    long long wave = -1;
    fo_json_get_int(ev->body, "wave", 0, INT64_MAX, &wave);
    if (!el)
        return;
    snprintf(el->id, sizeof(el->id), "forum-gate-%lu", ++s->elicit_n);
    el->run = ev->run;
    el->wave = wave;
    el->next = s->elicits;
    s->elicits = el;
    push(c, mcp_elicit_request(el->id, ev->body, ev->run));
}

/* The engine's reply: the result on the stream, or as JSON. */
static void call_reply(void *arg, int rc, cJSON *out, const struct fo_err *err)
{
    struct hm_call *c = arg;
    struct surf_http *h = c->h;
    surf_http_on_gone(h, c->req, NULL, NULL);
    call_unlink(c);
    cJSON *reply = NULL;
    if (!c->cancelled && !c->gone)
        reply = rc == FO_OK ? mcp_tool_result(c->id, c->params, out, 0)
                            : mcp_tool_error(c->id, c->params, err);
    else
        cJSON_Delete(out);
    if (c->lost) {
        cJSON_Delete(reply);
        http_finished(h); /* the connection took the request with it */
    } else if (c->gone) {
        /* detached from its connection: an answer only frees it */
        cJSON_Delete(reply);
        if (c->sse)
            evhttp_send_reply_end(c->req);
        else
            evhttp_send_reply(c->req, 204, NULL, NULL);
        http_finished(h);
    } else if (c->sse) {
        if (reply)
            push(c, reply);
        evhttp_send_reply_end(c->req);
        http_finished(h);
    } else if (c->cancelled) {
        cJSON_Delete(reply);
        send_empty(h, c->req, 204, c->t0);
        http_finished(h);
    } else {
        send_json(h, c->req, 200, reply, c->s ? c->s->id : NULL, c->t0);
        http_finished(h);
    }
    call_free(c);
}

/* tools/call of a run method: parked on the engine. 1 when taken. */
static int call_run(struct surf_http *h, struct hm_sess *s,
                    struct evhttp_request *req, const struct surf_method *m,
                    const cJSON *msg, const cJSON *args, int64_t t0)
{
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    if (s->ncalls >= CALLS_MAX) {
        struct fo_err e;
        fo_err_set(&e, FO_E_BUSY, "%d calls of this session are running",
                   CALLS_MAX);
        send_json(h, req, 200, mcp_tool_error(id, params, &e), s->id, t0);
        return 0;
    }
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(params, "_meta"), "progressToken");
    struct hm_call *c = calloc(1, sizeof(*c));
    if (!c)
        return send_refusal(h, req, 500, SURF_MCP_INTERNAL_ERROR,
                            "out of memory", t0),
               0;
    *c = (struct hm_call){.h = h,
                          .s = s,
                          .req = req,
                          .t0 = t0,
                          .id = cJSON_Duplicate(id, 1),
                          .params = cJSON_Duplicate(params, 1),
                          .run = -1,
                          .gate = -1};
    if (cJSON_IsString(tok) || cJSON_IsNumber(tok))
        c->token = cJSON_Duplicate(tok, 1);
    const char *acc =
        evhttp_find_header(evhttp_request_get_input_headers(req), "Accept");
    c->json_only =
        acc && !strstr(acc, "text/event-stream") && !strstr(acc, "*/*");
    struct surf_ctx ctx = *h->cfg.loop_ctx;
    /* run_start answers once the run began: its steps go to no call */
    int steps = strcmp(m->name, "run_start") != 0;
    ctx.run_event = steps ? call_event : NULL;
    ctx.run_hook = steps ? c : NULL;
    struct fo_err err;
    if (!c->id || !c->params ||
        surf_start(&ctx, m, args, call_reply, c, &err) != FO_OK) {
        if (!c->id || !c->params)
            fo_err_set(&err, FO_E_NOMEM, NULL);
        send_json(h, req, 200, mcp_tool_error(id, params, &err), s->id, t0);
        call_free(c);
        return 0;
    }
    c->next = s->calls;
    s->calls = c;
    s->ncalls++;
    surf_http_on_gone(h, req, call_gone, c);
    return 1;
}

/* notifications/cancelled: the call's run ends through the engine's one
 * cancel; its result is not sent. */
static void cancel(struct surf_http *h, struct hm_sess *s, const cJSON *params)
{
    const cJSON *rid = cJSON_GetObjectItemCaseSensitive(params, "requestId");
    struct orch_engine *e = h->cfg.loop_ctx->engine;
    for (struct hm_call *c = s->calls; rid && c; c = c->next)
        if (cJSON_Compare(c->id, rid, 1) && !c->cancelled) {
            c->cancelled = 1;
            if (c->run >= 0 && e)
                orch_engine_cancel(e, c->run);
        }
}

/* The client's answer to an elicitation: its decision on the gate, through
 * the engine like any other. */
static void gate_done(void *arg, int rc, cJSON *out, const struct fo_err *err)
{
    struct surf_http *h = arg;
    if (rc != FO_OK)
        http_logm(h, "mcp: the client's gate decision was not taken",
                  err ? err->msg : "");
    cJSON_Delete(out);
}

static void elicit_answer(struct surf_http *h, struct hm_sess *s,
                          const cJSON *msg)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    struct hm_elicit *el = NULL;
    for (struct hm_elicit **p = &s->elicits; cJSON_IsString(id) && *p;
         p = &(*p)->next)
        if (!strcmp((*p)->id, id->valuestring)) {
            el = *p;
            *p = el->next;
            break;
        }
    struct orch_engine *e = h->cfg.loop_ctx->engine;
    if (!el || !e) {
        free(el);
        return;
    }
    char approver[96];
    snprintf(approver, sizeof(approver), "%s (MCP elicitation)",
             s->peer.client);
    struct orch_gate_decision d = {
        .run = el->run, .wave = el->wave, .approver = approver};
    cJSON *edits = NULL;
    struct fo_err err;
    if (mcp_elicit_decision(msg, &d, &edits) &&
        orch_engine_gate(e, &d, gate_done, h, &err) != FO_OK)
        http_logm(h, "mcp: the client's gate decision was not taken", err.msg);
    cJSON_Delete(edits);
    free(el);
}

/* ---- messages answered on a worker ---------------------------------------
 * tools/call of a method that runs on a worker, resources/read and
 * prompts/get: the worker's own ledger handle, as over HTTP. */

static void worker_reply(struct job *j, struct surf_ctx *ctx)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j->in, "id");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(j->in, "params");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(j->in, "method");
    cJSON *reply;
    if (!ctx)
        reply = mcp_rpc_error(id, SURF_MCP_INTERNAL_ERROR,
                              "the worker has no ledger");
    else if (!strcmp(method->valuestring, "tools/call"))
        reply = mcp_tools_call(ctx, j->mflags, id, params);
    else
        reply = mcp_read_or_prompt(ctx, id, method->valuestring, params);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    mcp_serialize(&b, reply, 1);
    cJSON_Delete(reply);
    j->status = 200;
    j->body = fo_buf_detach(&b, &j->body_len);
}

/* Takes msg into a job (1), or answers (0). */
static int to_worker(struct surf_http *h, struct hm_sess *s,
                     struct evhttp_request *req, cJSON *msg, int64_t t0)
{
    struct job *j = http_job_new(h, req, NULL, ROUTE_MCP, t0, msg);
    if (!j) {
        cJSON_Delete(msg);
        send_refusal(h, req, 500, SURF_MCP_INTERNAL_ERROR, "out of memory", t0);
        return 0;
    }
    j->work = worker_reply;
    j->mflags = s->flags;
    evhttp_add_header(evhttp_request_get_output_headers(req), "Mcp-Session-Id",
                      s->id);
    pthread_mutex_lock(&h->mu);
    http_q_push(&h->work, j);
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return 1;
}

/* tools/call: where the method's row says it runs. 1 when in flight. */
static int tools_call(struct surf_http *h, struct hm_sess *s,
                      struct evhttp_request *req, cJSON *msg, int64_t t0)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
    const cJSON *args;
    cJSON *reply;
    const struct surf_method *m =
        mcp_tool_args(id, params, s->flags, &args, &reply);
    int kept = 0;
    if (!m)
        send_json(h, req, 200, reply, s->id, t0);
    else if (m->where == SURF_ON_RUN && h->cfg.loop_ctx->engine)
        kept = call_run(h, s, req, m, msg, args, t0);
    else if (m->where == SURF_ON_LOOP && h->loop_reads)
        send_json(h, req, 200,
                  mcp_tools_call(h->cfg.loop_ctx, s->flags, id, params), s->id,
                  t0);
    else
        return to_worker(h, s, req, msg, t0);
    cJSON_Delete(msg);
    return kept;
}

/* ---- POST /mcp ---------------------------------------------------------- */

/* The message of a POST: one JSON-RPC object (numbers keep their text only
 * on the id). NULL when answered. */
static cJSON *read_message(struct surf_http *h, struct evhttp_request *req,
                           int64_t t0)
{
    struct evkeyvalq *ih = evhttp_request_get_input_headers(req);
    struct fo_err err;
    if (surf_http_guard_ctype(evhttp_find_header(ih, "Content-Type"), &err) !=
        FO_OK) {
        send_refusal(h, req, 415, SURF_MCP_INVALID_REQUEST, err.msg, t0);
        return NULL;
    }
    const char *pv = evhttp_find_header(ih, "MCP-Protocol-Version");
    if (pv && !mcp_version_known(pv)) {
        send_refusal(h, req, 400, SURF_MCP_INVALID_REQUEST,
                     "unsupported MCP-Protocol-Version", t0);
        return NULL;
    }
    struct evbuffer *ib = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(ib);
    const char *data = len ? (const char *)evbuffer_pullup(ib, -1) : NULL;
    cJSON *msg = NULL;
    if (!data || fo_json_parse_flags(data, len, FO_JSON_NUMBER_TEXT, &msg,
                                     &err) != FO_OK) {
        send_json(h, req, 400,
                  mcp_rpc_error(NULL, SURF_MCP_PARSE_ERROR, "parse error: %s",
                                data ? err.msg : "empty body"),
                  NULL, t0);
        return NULL;
    }
    if (!cJSON_IsObject(msg)) {
        cJSON_Delete(msg);
        send_refusal(h, req, 400, SURF_MCP_INVALID_REQUEST,
                     cJSON_IsArray(msg) ? "a batch is not accepted over HTTP: "
                                          "send one message a request"
                                        : "a message must be a JSON object",
                     t0);
        return NULL;
    }
    cJSON *f;
    cJSON_ArrayForEach (f, msg)
        if (strcmp(f->string, "id") != 0)
            fo_json_drop_number_text(f);
    return msg;
}

/* initialize: a new session. */
static void initialize(struct surf_http *h, struct evhttp_request *req,
                       const cJSON *msg, int admin, int64_t t0)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    struct hm_sess *s = sess_new(h);
    if (!s) {
        send_json(h, req, 503,
                  mcp_rpc_error(id, SURF_MCP_INTERNAL_ERROR,
                                "no room for another MCP session"),
                  NULL, t0);
        return;
    }
    s->flags = admin ? SURF_MCP_ADMIN : 0;
    send_json(h, req, 200,
              mcp_initialize(id,
                             cJSON_GetObjectItemCaseSensitive(msg, "params"),
                             &s->peer),
              s->id, t0);
}

/* A request of a session (msg taken). 1 when in flight. */
static int request(struct surf_http *h, struct hm_sess *s,
                   struct evhttp_request *req, cJSON *msg, int64_t t0)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    const char *method =
        cJSON_GetObjectItemCaseSensitive(msg, "method")->valuestring;
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
    cJSON *reply;
    if (params && !cJSON_IsObject(params))
        reply = mcp_rpc_error(id, SURF_MCP_INVALID_PARAMS,
                              "params must be an object");
    else if (!strcmp(method, "tools/call"))
        return tools_call(h, s, req, msg, t0);
    else if (!strcmp(method, "resources/read") ||
             !strcmp(method, "prompts/get"))
        return to_worker(h, s, req, msg, t0);
    else if (!strcmp(method, "initialize"))
        reply = mcp_rpc_error(id, SURF_MCP_INVALID_REQUEST,
                              "this session is initialized already");
    else if (!strcmp(method, "ping"))
        reply = mcp_rpc_result(id, cJSON_CreateObject());
    else if (!strcmp(method, "tools/list"))
        reply = mcp_tools_list(id, s->flags);
    else if (!strcmp(method, "resources/list"))
        reply = mcp_rpc_result(id, mcp_resources_list());
    else if (!strcmp(method, "resources/templates/list"))
        reply = mcp_rpc_result(id, mcp_resource_templates());
    else if (!strcmp(method, "prompts/list"))
        reply = mcp_rpc_result(id, mcp_prompts_list());
    else
        reply = mcp_rpc_error(id, SURF_MCP_METHOD_NOT_FOUND,
                              "method not found: %.64s", method);
    send_json(h, req, 200, reply, s->id, t0);
    cJSON_Delete(msg);
    return 0;
}

/* Checks the envelope; NULL when well formed, else the error reply. */
static cJSON *envelope_error(const cJSON *msg)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
    const cJSON *jv = cJSON_GetObjectItemCaseSensitive(msg, "jsonrpc");
    if (id && !cJSON_IsString(id) && !cJSON_IsNumber(id))
        return mcp_rpc_error(NULL, SURF_MCP_INVALID_REQUEST,
                             "id must be a string or a number");
    if (!cJSON_IsString(jv) || strcmp(jv->valuestring, "2.0") != 0)
        return mcp_rpc_error(id, SURF_MCP_INVALID_REQUEST,
                             "jsonrpc must be \"2.0\"");
    if (method && !cJSON_IsString(method))
        return mcp_rpc_error(id, SURF_MCP_INVALID_REQUEST,
                             "method must be a string");
    if (!method && !cJSON_GetObjectItemCaseSensitive(msg, "result") &&
        !cJSON_GetObjectItemCaseSensitive(msg, "error"))
        return mcp_rpc_error(id, SURF_MCP_INVALID_REQUEST, "missing method");
    return NULL;
}

static int post(struct surf_http *h, struct evhttp_request *req, int admin,
                int64_t t0)
{
    cJSON *msg = read_message(h, req, t0);
    if (!msg)
        return 0;
    cJSON *bad = envelope_error(msg);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
    if (bad) {
        send_json(h, req, 400, bad, NULL, t0);
    } else if (method && id && !strcmp(method->valuestring, "initialize")) {
        initialize(h, req, msg, admin, t0);
    } else {
        const char *sid = evhttp_find_header(
            evhttp_request_get_input_headers(req), "Mcp-Session-Id");
        struct hm_sess *s = sess_find(h, sid);
        if (!sid) {
            send_refusal(h, req, 400, SURF_MCP_INVALID_REQUEST,
                         "Mcp-Session-Id is missing: initialize first", t0);
        } else if (!s) {
            send_refusal(h, req, 404, SURF_MCP_INVALID_REQUEST,
                         "no such session (ended or expired): initialize "
                         "again",
                         t0);
        } else {
            s->last_us = ledger_now_us();
            if (method && id)
                return request(h, s, req, msg, t0);
            if (!method) /* a response: to an elicitation of ours */
                elicit_answer(h, s, msg);
            else if (!strcmp(method->valuestring, "notifications/cancelled"))
                cancel(h, s, cJSON_GetObjectItemCaseSensitive(msg, "params"));
            send_empty(h, req, 202, t0);
        }
    }
    cJSON_Delete(msg);
    return 0;
}

static int get_open(struct surf_http *h, struct hm_sess *s,
                    struct evhttp_request *req, int64_t t0)
{
    if (s->get) {
        send_refusal(h, req, 409, SURF_MCP_INVALID_REQUEST,
                     "this session's stream is open already", t0);
        return 0;
    }
    if (!s->beat && !(s->beat = evtimer_new(h->base, beat, s))) {
        send_refusal(h, req, 500, SURF_MCP_INTERNAL_ERROR, "out of memory", t0);
        return 0;
    }
    sse_start(h, req, s->id, t0);
    s->get = req;
    s->get_t0 = t0;
    surf_http_on_gone(h, req, get_gone, s);
    struct timeval tv = {BEAT_S, 0};
    evtimer_add(s->beat, &tv);
    return 1;
}

/* The session a GET or DELETE names; NULL when answered. */
static struct hm_sess *named_session(struct surf_http *h,
                                     struct evhttp_request *req, int64_t t0)
{
    const char *sid = evhttp_find_header(evhttp_request_get_input_headers(req),
                                         "Mcp-Session-Id");
    struct hm_sess *s = sess_find(h, sid);
    if (!s)
        send_refusal(h, req, sid ? 404 : 400, SURF_MCP_INVALID_REQUEST,
                     sid ? "no such session (ended or expired)"
                         : "Mcp-Session-Id is missing: initialize first",
                     t0);
    return s;
}

/* DELETE /mcp: the session ends; its runs go on. */
static void end_session(struct surf_http *h, struct evhttp_request *req,
                        int64_t t0)
{
    struct hm_sess *s = named_session(h, req, t0);
    if (!s)
        return;
    sess_unlink(h, s);
    sess_free(s);
    send_empty(h, req, 204, t0);
}

int http_mcp_handle(struct surf_http *h, struct evhttp_request *req,
                    const char *verb, int admin, int64_t t0)
{
    if (!strcmp(verb, "POST"))
        return post(h, req, admin, t0);
    if (!strcmp(verb, "DELETE")) {
        end_session(h, req, t0);
        return 0;
    }
    if (!strcmp(verb, "GET")) {
        struct hm_sess *s = named_session(h, req, t0);
        return s ? get_open(h, s, req, t0) : 0;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                      "GET, POST, DELETE");
    send_refusal(h, req, 405, SURF_MCP_INVALID_REQUEST,
                 "/mcp: POST a message, GET the session's stream, DELETE "
                 "to end it",
                 t0);
    return 0;
}
