/* cli_mcp_bridge: `forum mcp` beside a daemon: standard input and output
 * carried to the daemon's /mcp (MCP over Streamable HTTP) and back, so an
 * editor's calls run on the daemon's engine and its runs report every step
 * (notifications/progress), ask at gates (elicitation/create) and end on
 * notifications/cancelled, as they do over HTTP.
 *
 * One thread reads standard input, line by line, and hands each message
 * to the loop thread (an event base running the project's HTTP client,
 * daemon/httpc.c), which posts it to /mcp and writes what comes back, one
 * message a line, as it comes (an event stream's messages one by one).
 * Order is kept as over stdio: a call that may take as long as a run goes
 * at once, every other request waits for the one before it; `initialize`
 * goes first, alone, for the session it opens. When the daemon forgets the
 * session (it restarted), the bridge opens a new one with the client's own
 * initialize and sends the message again. When the daemon stops answering
 * altogether (a connection refused: nothing was sent), the caller's
 * fallback names where calls go from then on (a daemon started since, or
 * an engine hosted in this process): the bridge opens a session there and
 * sends the message again. At the end of input every call in flight is
 * answered before it returns. */
#include "cli/cli_mcp_bridge.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/thread.h>

#include "daemon/httpc.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "surfaces/mcp.h"
#include "surfaces/mcp_proto.h"
#include "surfaces/surf.h"

#define LONG_MS (24 * 3600 * 1000) /* a run may take that long */
#define SHORT_MS 120000
#define BODY_MAX (64u << 20)
#define LINE_CHUNK 65536
/* JSON-RPC batches: only under this protocol version (it dropped them
 * after), at most this many messages in one */
#define BATCH_VERSION "2025-03-26"
#define BATCH_COUNT_MAX 1000

struct batch; /* a batch line's messages, answered as one array */

struct msg {
    char *text; /* the line as the client wrote it */
    size_t len;
    cJSON *j;       /* parsed (NULL: not JSON; the daemon says so) */
    int is_init;    /* an initialize request */
    int ordered;    /* waits for the one before it, and holds the next */
    int tools_list; /* its reply's admin tools are hidden (no --admin) */
    int retried;    /* sent again once after a new session */
    int moved;      /* sent again after the endpoint moved (times) */
    int quiet;      /* a re-initialize of ours: its reply is not written */
    int too_long;   /* a line over SURF_MCP_LINE_MAX: refused in its turn */
    int is_batch;   /* a JSON array: a batch */
    struct batch *batch; /* one message of a batch: its reply goes there */
    size_t slot;         /* its place in the batch's reply */
    struct msg *next;
};

struct batch {
    size_t n, left;
    struct fo_buf *slots; /* each message's reply (empty: none) */
};

struct bridge {
    struct event_base *base;
    struct event *wake;
    struct httpc_url url;
    char auth[160];
    unsigned flags;
    int out_fd;
    /* shared with the reader, under mu */
    pthread_mutex_t mu;
    struct msg *head, *tail;
    int eof;
    /* loop thread */
    char sid[64];
    char version[16];
    char *init_text; /* the client's initialize, for a new session */
    size_t init_len;
    int holding;  /* an ordered request (or initialize) is in flight */
    int opening;  /* an initialize is in flight: nothing else goes */
    int inflight; /* requests in flight */
    int out_failed;
    struct fo_err out_err;
    const struct cli_mcp_fallback *fb; /* may be NULL */
    int gen;      /* the endpoint's generation: one more at each move */
    int init_gen; /* the generation a session was asked of */
    int moves;
};

/* One request to /mcp in flight. */
struct call {
    struct bridge *b;
    struct msg *m;
    int gen; /* the endpoint it went to */
    struct httpc_sse sse;
    int sse_on;
};

static void msg_free(struct msg *m)
{
    if (!m)
        return;
    free(m->text);
    cJSON_Delete(m->j);
    free(m);
}

static void write_line(struct bridge *b, const char *p, size_t len)
{
    while (len > 0 && (p[len - 1] == '\n' || p[len - 1] == '\r'))
        len--;
    if (b->out_failed || len == 0)
        return;
    struct fo_buf o;
    fo_buf_init(&o, FO_BUF_UNLIMITED);
    if (fo_buf_append(&o, p, len) || fo_buf_putc(&o, '\n')) {
        fo_buf_release(&o);
        return;
    }
    const char *q = o.data;
    size_t left = o.len;
    while (left > 0) {
        ssize_t w = write(b->out_fd, q, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            b->out_failed = 1;
            fo_err_set(&b->out_err, FO_E_IO, "writing the output: %s",
                       w < 0 ? strerror(errno) : "short write");
            break;
        }
        q += w;
        left -= (size_t)w;
    }
    fo_buf_release(&o);
}

static void write_json(struct bridge *b, cJSON *reply)
{
    struct fo_buf t;
    fo_buf_init(&t, FO_BUF_UNLIMITED);
    mcp_serialize(&t, reply, 0);
    cJSON_Delete(reply);
    write_line(b, t.data, t.len);
    fo_buf_release(&t);
}

/* A message of a batch: a response goes to its slot; what comes before
 * it (progress, a request to the client) is written at once. */
static void emit(struct bridge *b, struct msg *m, const char *p, size_t len)
{
    if (!m->batch) {
        write_line(b, p, len);
        return;
    }
    cJSON *r = NULL;
    struct fo_err e;
    int response =
        fo_json_parse_flags(p, len, FO_JSON_NUMBER_TEXT, &r, &e) == FO_OK &&
        !cJSON_GetObjectItemCaseSensitive(r, "method");
    cJSON_Delete(r);
    if (!response) {
        write_line(b, p, len);
        return;
    }
    while (len > 0 && (p[len - 1] == '\n' || p[len - 1] == '\r'))
        len--;
    struct fo_buf *s = &m->batch->slots[m->slot];
    fo_buf_reset(s);
    if (fo_buf_append(s, p, len))
        fo_buf_reset(s);
}

static void emit_json(struct bridge *b, struct msg *m, cJSON *reply)
{
    struct fo_buf t;
    fo_buf_init(&t, FO_BUF_UNLIMITED);
    mcp_serialize(&t, reply, 0);
    cJSON_Delete(reply);
    emit(b, m, t.data, t.len);
    fo_buf_release(&t);
}

/* A tools/list reply without the admin tools (when not --admin). */
static void write_reply(struct bridge *b, struct msg *m, const char *p,
                        size_t len)
{
    if (!m->tools_list) {
        emit(b, m, p, len);
        return;
    }
    cJSON *r = NULL;
    struct fo_err e;
    if (fo_json_parse_flags(p, len, FO_JSON_NUMBER_TEXT, &r, &e) != FO_OK) {
        emit(b, m, p, len);
        return;
    }
    cJSON *tools = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(r, "result"), "tools");
    cJSON *t = tools ? tools->child : NULL;
    while (t) {
        cJSON *next = t->next;
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(t, "name");
        const struct surf_method *sm =
            cJSON_IsString(n) ? surf_find(n->valuestring) : NULL;
        if (sm && !mcp_offered(b->flags, sm))
            cJSON_Delete(cJSON_DetachItemViaPointer(tools, t));
        t = next;
    }
    emit_json(b, m, r);
}

/* ---- classifying a message ----------------------------------------------- */

static void classify(struct bridge *b, struct msg *m)
{
    struct fo_err e;
    if (fo_json_parse_flags(m->text, m->len, FO_JSON_NUMBER_TEXT, &m->j, &e) !=
            FO_OK ||
        !cJSON_IsObject(m->j)) {
        m->is_batch = cJSON_IsArray(m->j);
        m->ordered = 1; /* an error reply, or a batch, in its turn */
        return;
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(m->j, "id");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(m->j, "method");
    if (!id || !cJSON_IsString(method))
        return; /* a notification or a response: at once */
    const char *mn = method->valuestring;
    m->is_init = !strcmp(mn, "initialize");
    m->tools_list = !strcmp(mn, "tools/list") && !(b->flags & SURF_MCP_ADMIN);
    m->ordered = 1;
    if (strcmp(mn, "tools/call") != 0)
        return;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(m->j, "params"), "name");
    const struct surf_method *sm =
        cJSON_IsString(name) ? surf_find(name->valuestring) : NULL;
    if (sm && ((sm->flags & SURF_LONG) || sm->where == SURF_ON_RUN))
        m->ordered = 0; /* as long as a run: others are answered meanwhile */
}

/* A tools/call of an admin tool without --admin: refused here, as the
 * stdio server would. */
static int refused_here(struct bridge *b, struct msg *m)
{
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(m->j, "method");
    if (!cJSON_IsString(method) || strcmp(method->valuestring, "tools/call"))
        return 0;
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(m->j, "params");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(params, "name");
    const struct surf_method *sm =
        cJSON_IsString(name) ? surf_find(name->valuestring) : NULL;
    if (!sm || mcp_offered(b->flags, sm))
        return 0;
    write_json(b, mcp_rpc_error(cJSON_GetObjectItemCaseSensitive(m->j, "id"),
                                SURF_MCP_INVALID_PARAMS, "unknown tool: %.64s",
                                name->valuestring));
    return 1;
}

/* ---- requests to /mcp ---------------------------------------------------- */

static void pump(struct bridge *b);

static int on_event(void *arg, const char *type, const char *data, size_t len)
{
    (void)type;
    struct call *c = arg;
    if (!c->m->quiet)
        write_reply(c->b, c->m, data, len);
    return 0;
}

static void on_chunk(void *arg, struct httpc_req *r, struct evbuffer *data)
{
    struct call *c = arg;
    const char *ct = httpc_req_header(r, "Content-Type");
    if (httpc_req_status(r) != 200 || !ct ||
        strncmp(ct, "text/event-stream", 17) != 0)
        return; /* comes whole to done */
    c->sse_on = 1;
    httpc_sse_feed(&c->sse, data, on_event, c);
}

/* The session's id and version from an initialize's answer. */
static void take_session(struct bridge *b, struct httpc_result *res,
                         const char *body, size_t len)
{
    const char *sid = res->headers
                          ? evhttp_find_header(res->headers, "Mcp-Session-Id")
                          : NULL;
    if (sid && strlen(sid) < sizeof(b->sid))
        snprintf(b->sid, sizeof(b->sid), "%s", sid);
    cJSON *r = NULL;
    struct fo_err e;
    if (fo_json_parse(body, len, &r, &e) == FO_OK) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(r, "result"), "protocolVersion");
        if (cJSON_IsString(v) && strlen(v->valuestring) < sizeof(b->version))
            snprintf(b->version, sizeof(b->version), "%s", v->valuestring);
    }
    cJSON_Delete(r);
}

static int send_msg(struct bridge *b, struct msg *m);
static void batch_one(struct bridge *b, struct msg *m);

/* A session the bridge opens itself (the client sent no initialize: the
 * stdio server answers without one). */
static const char auto_init[] =
    "{\"jsonrpc\":\"2.0\",\"id\":\"forum-mcp-session\",\"method\":"
    "\"initialize\",\"params\":{\"protocolVersion\":\"" SURF_MCP_LATEST
    "\",\"capabilities\":{},\"clientInfo\":{\"name\":\"forum mcp\"}}}";

/* Queues a quiet initialize (text, len), then m, at the head. 1 when
 * queued. */
static int open_before(struct bridge *b, struct msg *m, const char *text,
                       size_t len)
{
    struct msg *init = calloc(1, sizeof(*init));
    char *t = malloc(len + 1);
    if (!init || !t) {
        free(init);
        free(t);
        return 0;
    }
    memcpy(t, text, len);
    t[len] = '\0';
    *init = (struct msg){
        .text = t, .len = len, .is_init = 1, .ordered = 1, .quiet = 1};
    b->sid[0] = '\0';
    pthread_mutex_lock(&b->mu);
    m->next = b->head;
    init->next = m;
    b->head = init;
    if (!b->tail)
        b->tail = m;
    pthread_mutex_unlock(&b->mu);
    return 1;
}

/* m again, at the head, behind a session's initialize queued there. */
static void requeue(struct bridge *b, struct msg *m)
{
    pthread_mutex_lock(&b->mu);
    struct msg **p = &b->head;
    while (*p && (*p)->is_init && (*p)->quiet)
        p = &(*p)->next;
    m->next = *p;
    *p = m;
    if (!m->next)
        b->tail = m;
    pthread_mutex_unlock(&b->mu);
}

#define MOVES_MAX 8 /* endpoints taken in one session, at most */

/* A connection to the endpoint was refused: the fallback names another
 * (once per endpoint: a call sent to one that has moved since just goes
 * again), a session is asked of it, and m goes again. 1 when m was
 * queued again. */
static int move(struct bridge *b, struct call *c, struct msg *m)
{
    if (!b->fb || m->batch || m->moved >= 2)
        return 0;
    if (c->gen == b->gen) {
        if (b->moves >= MOVES_MAX)
            return 0;
        char host[256], token[128];
        int port = 0;
        struct fo_err err;
        if (b->fb->move(b->fb->arg, host, sizeof(host), &port, token,
                        sizeof(token), &err) != FO_OK) {
            fprintf(stderr, "forum mcp: %s\n", err.msg);
            return 0;
        }
        char url[512];
        struct httpc_url u;
        snprintf(url, sizeof(url), "http://%s:%d/mcp", host, port);
        if (httpc_url_parse(url, &u, &err) != FO_OK)
            return 0;
        httpc_url_release(&b->url);
        b->url = u;
        snprintf(b->auth, sizeof(b->auth), "Bearer %s", token);
        b->sid[0] = '\0';
        b->gen++;
        b->moves++;
    }
    m->moved++;
    if (!m->is_init && b->init_gen != b->gen && b->init_text) {
        b->init_gen = b->gen; /* a session there first, then m */
        if (open_before(b, m, b->init_text, b->init_len))
            return 1;
    }
    if (m->is_init)
        b->init_gen = b->gen;
    requeue(b, m);
    return 1;
}

/* The daemon no longer knows the session (it restarted): a new one with
 * the client's own initialize, then m again. 1 when it was queued. */
static int renew(struct bridge *b, struct msg *m)
{
    if (m->retried || m->is_init || !b->init_text)
        return 0;
    m->retried = 1;
    return open_before(b, m, b->init_text, b->init_len);
}

static void done(void *arg, struct httpc_result *res)
{
    struct call *c = arg;
    struct bridge *b = c->b;
    struct msg *m = c->m;
    b->inflight--;
    if (m->ordered)
        b->holding = 0;
    if (m->is_init)
        b->opening = 0;
    size_t len = evbuffer_get_length(res->body);
    const char *body =
        len ? (const char *)evbuffer_pullup(res->body, (ssize_t)len) : "";
    const cJSON *id =
        m->j ? cJSON_GetObjectItemCaseSensitive(m->j, "id") : NULL;
    if (res->end == HTTPC_END_CONNECT && move(b, c, m)) {
        m = NULL; /* queued again, for where calls go now */
    } else if (res->end != HTTPC_END_OK && !c->sse_on) {
        if (id)
            emit_json(b, m,
                      mcp_rpc_error(id, SURF_MCP_INTERNAL_ERROR,
                                    "the daemon did not answer: %s",
                                    res->err.msg));
    } else if (res->status == 404 && b->sid[0] && renew(b, m)) {
        m = NULL; /* queued again, after a new session */
    } else {
        if (m->is_init && res->status == 200)
            take_session(b, res, body, len);
        if (c->sse_on && c->sse.has_data) /* a last event without its end */
            on_event(c, "message", c->sse.data.data, c->sse.data.len);
        else if (!c->sse_on && len && !m->quiet)
            write_reply(b, m, body, len);
    }
    httpc_sse_release(&c->sse);
    free(c);
    if (m && m->batch)
        batch_one(b, m);
    msg_free(m);
    pump(b);
}

static int send_msg(struct bridge *b, struct msg *m)
{
    struct call *c = calloc(1, sizeof(*c));
    if (!c)
        return FO_E_NOMEM;
    c->b = b;
    c->m = m;
    c->gen = b->gen;
    httpc_sse_init(&c->sse, BODY_MAX);
    struct httpc_header h[5];
    size_t nh = 0;
    h[nh++] = (struct httpc_header){"Authorization", b->auth};
    h[nh++] = (struct httpc_header){"Content-Type", "application/json"};
    h[nh++] =
        (struct httpc_header){"Accept", "application/json, text/event-stream"};
    if (b->sid[0] && !m->is_init)
        h[nh++] = (struct httpc_header){"Mcp-Session-Id", b->sid};
    if (b->version[0] && !m->is_init)
        h[nh++] = (struct httpc_header){"MCP-Protocol-Version", b->version};
    struct httpc_spec spec = {.method = HTTPC_POST,
                              .url = &b->url,
                              .headers = h,
                              .n_headers = nh,
                              .body = m->text,
                              .body_len = m->len,
                              .connect_ms = 10000,
                              .timeout_ms = m->ordered ? SHORT_MS : LONG_MS,
                              .body_max = BODY_MAX,
                              .on_chunk = on_chunk,
                              .done = done,
                              .arg = c};
    struct fo_err err;
    if (httpc_req_start(b->base, &spec, NULL, &err) != FO_OK) {
        httpc_sse_release(&c->sse);
        free(c);
        return err.code;
    }
    b->inflight++;
    if (m->ordered)
        b->holding = 1;
    if (m->is_init)
        b->opening = 1;
    return FO_OK;
}

/* A batch whose every message was answered: one array of the replies
 * (none at all when each was a notification); then the next may go. */
static void batch_end(struct bridge *b, struct batch *t)
{
    struct fo_buf o;
    fo_buf_init(&o, FO_BUF_UNLIMITED);
    int count = 0, bad = fo_buf_putc(&o, '[') != FO_OK;
    for (size_t i = 0; i < t->n; i++) {
        if (!t->slots[i].len)
            continue;
        bad |= (count++ && fo_buf_putc(&o, ',') != FO_OK) ||
               fo_buf_append(&o, t->slots[i].data, t->slots[i].len) != FO_OK;
        fo_buf_release(&t->slots[i]);
    }
    bad |= fo_buf_putc(&o, ']') != FO_OK;
    if (count && !bad)
        write_line(b, o.data, o.len);
    fo_buf_release(&o);
    free(t->slots);
    free(t);
    b->holding = 0;
}

/* One message of a batch answered (or failed to go). */
static void batch_one(struct bridge *b, struct msg *m)
{
    struct batch *t = m->batch;
    m->batch = NULL;
    if (--t->left == 0)
        batch_end(b, t);
}

/* A batch line (2025-03-26 only): each message goes to /mcp on its own, at
 * once, and the replies are written as one array, in the batch's order;
 * the next ordered message waits for it. */
static void batch_start(struct bridge *b, struct msg *m)
{
    int n = cJSON_GetArraySize(m->j);
    cJSON *err = NULL;
    if (n == 0)
        err = mcp_rpc_error(NULL, SURF_MCP_INVALID_REQUEST, "empty batch");
    else if (strcmp(b->version, BATCH_VERSION) != 0)
        err = mcp_rpc_error(NULL, SURF_MCP_INVALID_REQUEST,
                            "batches are accepted only under protocol "
                            "version " BATCH_VERSION);
    else if (n > BATCH_COUNT_MAX)
        err = mcp_rpc_error(NULL, SURF_MCP_INVALID_REQUEST,
                            "batch of more than %d messages", BATCH_COUNT_MAX);
    struct batch *t = err ? NULL : calloc(1, sizeof(*t));
    if (t && !(t->slots = calloc((size_t)n, sizeof(*t->slots)))) {
        free(t);
        t = NULL;
    }
    if (!t) {
        write_json(b, err ? err
                          : mcp_rpc_error(NULL, SURF_MCP_INTERNAL_ERROR,
                                          "out of memory"));
        return;
    }
    t->n = t->left = (size_t)n;
    for (size_t i = 0; i < t->n; i++)
        fo_buf_init(&t->slots[i], BODY_MAX);
    b->holding = 1;
    size_t i = 0;
    cJSON *el;
    cJSON_ArrayForEach (el, m->j) {
        struct msg *one = calloc(1, sizeof(*one));
        struct fo_buf txt;
        fo_buf_init(&txt, FO_BUF_UNLIMITED);
        /* a numeric id goes on as the text the client wrote */
        cJSON *id = cJSON_IsObject(el)
                        ? cJSON_GetObjectItemCaseSensitive(el, "id")
                        : NULL;
        if (cJSON_IsNumber(id) && id->valuestring) {
            cJSON *raw = cJSON_CreateRaw(id->valuestring);
            if (raw)
                cJSON_ReplaceItemInObjectCaseSensitive(el, "id", raw);
        }
        mcp_serialize(&txt, el, 0);
        if (one && txt.len) {
            one->len = txt.len;
            one->text = txt.data; /* taken */
            one->batch = t;
            one->slot = i;
            classify(b, one);
            one->ordered = 0; /* the batch as a whole is */
            one->is_batch = 0;
        } else {
            fo_buf_release(&txt);
        }
        i++;
        if (!one || !one->text || send_msg(b, one) != FO_OK) {
            if (one && one->j && cJSON_GetObjectItemCaseSensitive(one->j, "id"))
                emit_json(b, one,
                          mcp_rpc_error(
                              cJSON_GetObjectItemCaseSensitive(one->j, "id"),
                              SURF_MCP_INTERNAL_ERROR,
                              "cannot reach the daemon"));
            if (one)
                batch_one(b, one);
            else if (--t->left == 0)
                batch_end(b, t);
            msg_free(one);
        }
    }
}

/* Sends what may go now: everything up to the next ordered request while
 * one is in flight, else that one too. Loop thread. */
static void pump(struct bridge *b)
{
    for (;;) {
        pthread_mutex_lock(&b->mu);
        struct msg *m = b->head;
        if (m && !m->j && !m->ordered && !m->is_init && !m->quiet)
            classify(b, m);
        if (m && ((m->ordered && b->holding) || b->opening))
            m = NULL; /* waits for the one before it (or the session) */
        if (m) {
            b->head = m->next;
            if (!b->head)
                b->tail = NULL;
        }
        int end = !b->head && b->eof;
        pthread_mutex_unlock(&b->mu);
        if (!m) {
            if (end && b->inflight == 0)
                event_base_loopbreak(b->base);
            return;
        }
        if (m->too_long) {
            write_json(b, mcp_rpc_error(NULL, SURF_MCP_INVALID_REQUEST,
                                        "a line over %u bytes",
                                        SURF_MCP_LINE_MAX));
            msg_free(m);
            continue;
        }
        if (m->j && refused_here(b, m)) {
            msg_free(m);
            continue;
        }
        if (!m->is_init && !b->sid[0] && !b->init_text) {
            /* no initialize came first: a session of the bridge's own */
            b->init_text = malloc(sizeof(auto_init));
            if (b->init_text)
                memcpy(b->init_text, auto_init, sizeof(auto_init));
            b->init_len = b->init_text ? sizeof(auto_init) - 1 : 0;
            if (b->init_text &&
                open_before(b, m, auto_init, sizeof(auto_init) - 1))
                continue;
        }
        if (m->is_batch) {
            batch_start(b, m);
            msg_free(m);
            continue;
        }
        if (m->is_init && !m->quiet) {
            free(b->init_text);
            b->init_text = malloc(m->len);
            if (b->init_text)
                memcpy(b->init_text, m->text, m->len);
            b->init_len = b->init_text ? m->len : 0;
        }
        if (send_msg(b, m) != FO_OK) {
            const cJSON *id =
                m->j ? cJSON_GetObjectItemCaseSensitive(m->j, "id") : NULL;
            if (id)
                write_json(b, mcp_rpc_error(id, SURF_MCP_INTERNAL_ERROR,
                                            "cannot reach the daemon"));
            msg_free(m);
        }
    }
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pump(arg);
}

/* ---- standard input ------------------------------------------------------ */

/* Reader thread: m to the queue's tail, and the loop woken. */
static void enqueue(struct bridge *b, struct msg *m)
{
    pthread_mutex_lock(&b->mu);
    if (b->tail)
        b->tail->next = m;
    else
        b->head = m;
    b->tail = m;
    pthread_mutex_unlock(&b->mu);
    event_active(b->wake, EV_READ, 0);
}

static void push(struct bridge *b, const char *p, size_t len)
{
    size_t i = 0;
    while (i < len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r'))
        i++;
    if (i == len)
        return; /* a blank line is no message */
    struct msg *m = calloc(1, sizeof(*m));
    char *t = malloc(len + 1);
    if (!m || !t) {
        free(m);
        free(t);
        return;
    }
    memcpy(t, p, len);
    t[len] = '\0';
    m->text = t;
    m->len = len;
    enqueue(b, m);
}

/* A line over SURF_MCP_LINE_MAX, skipped: an error in its turn. */
static void push_too_long(struct bridge *b)
{
    struct msg *m = calloc(1, sizeof(*m));
    if (!m)
        return;
    m->too_long = 1;
    m->ordered = 1;
    enqueue(b, m);
}

struct reader {
    struct bridge *b;
    int in_fd;
};

static void *read_main(void *arg)
{
    struct reader *r = arg;
    struct fo_buf line;
    fo_buf_init(&line, SURF_MCP_LINE_MAX);
    char *chunk = malloc(LINE_CHUNK);
    int skipping = 0;
    for (ssize_t n; chunk;) {
        n = read(r->in_fd, chunk, LINE_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (size_t pos = 0; pos < (size_t)n;) {
            char *nl = memchr(chunk + pos, '\n', (size_t)n - pos);
            size_t seg = nl ? (size_t)(nl - chunk) - pos : (size_t)n - pos;
            if (!skipping && fo_buf_append(&line, chunk + pos, seg) != FO_OK)
                skipping = 1; /* over SURF_MCP_LINE_MAX: refused */
            pos += seg + (nl ? 1 : 0);
            if (nl) {
                if (!skipping)
                    push(r->b, line.data, line.len);
                else
                    push_too_long(r->b);
                skipping = 0;
                fo_buf_reset(&line);
            }
        }
    }
    if (!skipping && line.len)
        push(r->b, line.data, line.len);
    else if (skipping)
        push_too_long(r->b);
    fo_buf_release(&line);
    free(chunk);
    pthread_mutex_lock(&r->b->mu);
    r->b->eof = 1;
    pthread_mutex_unlock(&r->b->mu);
    event_active(r->b->wake, EV_READ, 0);
    return NULL;
}

int cli_mcp_bridge(const char *host, int port, const char *token, int in_fd,
                   int out_fd, unsigned flags,
                   const struct cli_mcp_fallback *fb, struct fo_err *err)
{
    struct bridge b = {.out_fd = out_fd, .flags = flags, .fb = fb};
    char url[512];
    snprintf(url, sizeof(url), "http://%s:%d/mcp", host, port);
    snprintf(b.auth, sizeof(b.auth), "Bearer %s", token ? token : "");
    if (evthread_use_pthreads() != 0)
        return fo_err_set(err, FO_E_INTERNAL, "libevent without threads");
    int rc = httpc_url_parse(url, &b.url, err);
    if (rc)
        return rc;
    pthread_mutex_init(&b.mu, NULL);
    b.base = event_base_new();
    b.wake = b.base ? event_new(b.base, -1, EV_PERSIST, on_wake, &b) : NULL;
    struct reader r = {.b = &b, .in_fd = in_fd};
    pthread_t th;
    if (!b.wake || pthread_create(&th, NULL, read_main, &r) != 0) {
        rc = fo_err_set(err, FO_E_NOMEM, "cannot start the bridge");
    } else {
        event_add(b.wake, NULL);
        event_base_loop(b.base, EVLOOP_NO_EXIT_ON_EMPTY);
        pthread_join(th, NULL);
        if (b.out_failed) {
            *err = b.out_err;
            rc = err->code;
        }
    }
    while (b.head) {
        struct msg *m = b.head;
        b.head = m->next;
        msg_free(m);
    }
    if (b.wake)
        event_free(b.wake);
    if (b.base)
        event_base_free(b.base);
    free(b.init_text);
    httpc_url_release(&b.url);
    pthread_mutex_destroy(&b.mu);
    return rc;
}
