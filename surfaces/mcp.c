/* mcp: the MCP server: newline-delimited JSON-RPC 2.0 read with blocking
 * read() from one descriptor and answered on another, one write a message.
 * Every row of the handler table is a tool; surf_call does the work.
 *
 * A tool that takes as long as a run (SURF_LONG: submit, plan, plan_run)
 * runs on a thread of its own with its own ledger handle, so `ping`,
 * reads and other calls are answered meanwhile; the others are answered
 * in order. Each step of a run such a call began reaches the call as the
 * engine's own event (orch_run_event), before the call's result:
 * `notifications/progress` naming the step when the call carried a
 * progressToken, and, when the client declared the elicitation capability,
 * an `elicitation/create` for each approval gate the run waits at. Nothing
 * polls the ledger. `notifications/cancelled` cancels the call's run
 * (witnessed) and its reply is not sent. */
#include "surfaces/mcp.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/orch.h"
#include "surfaces/mcp_proto.h"
#include "surfaces/mcp_res.h"
#include "ledger/fo_json.h"

#define READ_CHUNK 65536
/* The largest single reply; past it the reply becomes a -32603 error. */
#define REPLY_MAX (64u << 20)
/* A batch answers at most this many messages and this many bytes. */
#define BATCH_COUNT_MAX 1000
#define BATCH_BYTES_MAX (64u << 20)

/* The one version under which JSON-RPC batches are part of MCP. */
#define BATCH_VERSION "2025-03-26"

/* Sent when even an error reply cannot be built. */
static const char oom_reply[] = "{\"error\":{\"code\":-32603,\"message\":"
                                "\"out of memory\"},\"id\":null,"
                                "\"jsonrpc\":\"2.0\"}";

#define CALLS_MAX 16 /* tool calls on threads at once */

struct mcp;

/* A tool call on a thread of its own. */
struct call {
    struct mcp *s;
    unsigned long serial;
    cJSON *msg;    /* the request (owned): id and params */
    cJSON *token;  /* its progressToken, or NULL */
    int64_t run;   /* the run it began, once on record; else -1 */
    int cancelled; /* notifications/cancelled came: no reply */
    int progress;  /* steps reported */
    int64_t gate;  /* the gate_requested last elicited, or -1 */
    struct call *next;
};

/* An elicitation/create sent, waiting for the client's answer. */
struct elicit {
    char id[40];
    int64_t run, wave;
    struct elicit *next;
};

struct mcp {
    struct surf_ctx *ctx;
    int out_fd;
    unsigned flags;
    struct mcp_peer peer; /* what initialize learnt (under mu) */
    struct fo_buf tmp;    /* one serialised reply */
    struct fo_buf out;    /* what goes out in one write */
    /* shared with the call threads, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct call *calls;
    int n_calls;
    unsigned long serial;
    int out_failed; /* a write failed: reported at the end */
    struct fo_err out_err;
    struct elicit *elicits;
    unsigned long elicit_n;
};

static void log_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_msg(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("forum mcp: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static int write_all(int fd, const char *p, size_t len, struct fo_err *err)
{
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return fo_err_set(err, FO_E_IO, "writing the output: %s",
                              w < 0 ? strerror(errno) : "short write");
        p += w;
        len -= (size_t)w;
    }
    return FO_OK;
}

/* Sends one reply (consumed) as one line; s->mu held. */
static int send_locked(struct mcp *s, cJSON *reply, struct fo_err *err)
{
    int rc = FO_OK;
    if (reply) {
        mcp_serialize(&s->tmp, reply, 1);
        cJSON_Delete(reply);
    } else {
        fo_buf_reset(&s->tmp);
        if (fo_buf_puts(&s->tmp, oom_reply) || fo_buf_putc(&s->tmp, '\n'))
            s->tmp.len = 0;
    }
    if (s->tmp.len)
        rc = write_all(s->out_fd, s->tmp.data, s->tmp.len, err);
    if (rc && !s->out_failed) {
        s->out_failed = 1;
        s->out_err = *err;
    }
    return rc;
}

static int send_reply(struct mcp *s, cJSON *reply, struct fo_err *err)
{
    pthread_mutex_lock(&s->mu);
    int rc;
    if (s->out_failed) {
        cJSON_Delete(reply);
        *err = s->out_err;
        rc = err->code;
    } else {
        rc = send_locked(s, reply, err);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* ---- methods ------------------------------------------------------------ */

/* ---- calls on threads --------------------------------------------------- */

static void call_free(struct call *c)
{
    cJSON_Delete(c->msg);
    cJSON_Delete(c->token);
    free(c);
}

/* The run a call began is on record (on the call's thread). */
static void call_started(void *hook, int64_t run)
{
    struct call *c = hook;
    struct mcp *s = c->s;
    pthread_mutex_lock(&s->mu);
    c->run = run;
    int cancel = c->cancelled;
    pthread_mutex_unlock(&s->mu);
    if (cancel)
        orch_run_cancel_here(s->ctx->orch, ledger_dir(s->ctx->ledger), run);
}

static void call_event(void *hook, const struct orch_run_event *ev);

static void *call_main(void *arg)
{
    struct call *c = arg;
    struct mcp *s = c->s;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c->msg, "id");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(c->msg, "params");
    struct ledger *l = NULL;
    struct fo_err err;
    fo_err_clear(&err);
    cJSON *reply;
    if (ledger_open(ledger_dir(s->ctx->ledger), 0, NULL, &l, &err) != FO_OK) {
        mcp_utf8_trim(err.msg);
        reply = mcp_tool_result(id, params, surf_error_json(&err), 1);
    } else {
        struct surf_ctx ctx = *s->ctx;
        ctx.ledger = l;
        ctx.run_started = call_started;
        ctx.run_event = call_event;
        ctx.run_hook = c;
        reply = mcp_tools_call(&ctx, s->flags, id, params);
        ledger_close(l);
    }
    pthread_mutex_lock(&s->mu);
    if (c->cancelled) { /* the client gave up on it: no reply */
        cJSON_Delete(reply);
    } else if (s->out_failed) {
        cJSON_Delete(reply);
    } else {
        struct fo_err werr;
        send_locked(s, reply, &werr);
    }
    for (struct call **p = &s->calls; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    s->n_calls--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    call_free(c);
    return NULL;
}

/* Starts tools/call msg on a thread (msg is taken); waits while CALLS_MAX
 * calls run. FO_E_NOMEM when no thread could be made (msg kept). */
static int call_start(struct mcp *s, cJSON *msg)
{
    struct call *c = calloc(1, sizeof(*c));
    if (!c)
        return FO_E_NOMEM;
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(msg, "params"), "_meta"),
        "progressToken");
    c->s = s;
    c->msg = msg;
    c->run = -1;
    c->gate = -1;
    c->token = cJSON_IsString(tok) || cJSON_IsNumber(tok)
                   ? cJSON_Duplicate(tok, 1)
                   : NULL;
    pthread_mutex_lock(&s->mu);
    while (s->n_calls >= CALLS_MAX)
        pthread_cond_wait(&s->cv, &s->mu);
    c->serial = ++s->serial;
    pthread_attr_t at;
    pthread_t th;
    int ok = pthread_attr_init(&at) == 0;
    if (ok) {
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        ok = pthread_create(&th, &at, call_main, c) == 0;
        pthread_attr_destroy(&at);
    }
    if (ok) {
        c->next = s->calls;
        s->calls = c;
        s->n_calls++;
    }
    pthread_mutex_unlock(&s->mu);
    if (!ok) {
        c->msg = NULL;
        call_free(c);
        return FO_E_NOMEM;
    }
    return FO_OK;
}

/* notifications/cancelled: the call with that id stops; its run is
 * cancelled (witnessed) and no reply is sent. */
static void call_cancel(struct mcp *s, const cJSON *params)
{
    const cJSON *rid = cJSON_GetObjectItemCaseSensitive(params, "requestId");
    if (!rid)
        return;
    int64_t run = -1;
    pthread_mutex_lock(&s->mu);
    for (struct call *c = s->calls; c; c = c->next)
        if (cJSON_Compare(cJSON_GetObjectItemCaseSensitive(c->msg, "id"), rid,
                          1)) {
            c->cancelled = 1;
            run = c->run;
        }
    pthread_mutex_unlock(&s->mu);
    if (run >= 0 &&
        orch_run_cancel_here(s->ctx->orch, ledger_dir(s->ctx->ledger), run))
        log_msg("run %lld: cancelled by the client", (long long)run);
}

/* ---- the watcher: progress and elicitation ------------------------------ */

/* A step of the run a call began, as the engine witnessed it, on the
 * call's thread (its engine's loop runs there), before the call's result:
 * progress when the call carried a progressToken, and at a gate an
 * elicitation/create when the client can be asked. Nothing is polled. */
static void call_event(void *hook, const struct orch_run_event *ev)
{
    struct call *c = hook;
    struct mcp *s = c->s;
    pthread_mutex_lock(&s->mu);
    if (c->cancelled || s->out_failed) {
        pthread_mutex_unlock(&s->mu);
        return;
    }
    c->progress = ev->step;
    struct fo_err werr;
    if (c->token)
        send_locked(s, mcp_progress(c->token, ev), &werr);
    if (s->peer.elicit_ok && !strcmp(ev->kind, "gate_requested") &&
        c->gate != ev->seq) {
        c->gate = ev->seq;
        struct elicit *e = calloc(1, sizeof(*e));
        long long wave = -1;
        fo_json_get_int(ev->body, "wave", 0, INT64_MAX, &wave);
        if (e) {
            snprintf(e->id, sizeof(e->id), "forum-gate-%lu", ++s->elicit_n);
            e->run = ev->run;
            e->wave = wave;
            e->next = s->elicits;
            s->elicits = e;
            send_locked(s, mcp_elicit_request(e->id, ev->body, ev->run), &werr);
        }
    }
    pthread_mutex_unlock(&s->mu);
}

/* The client's answer to an elicitation: its decision on the gate,
 * witnessed like any other (approver: the client, via elicitation). */
static void elicit_answer(struct mcp *s, const cJSON *msg)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    struct elicit *e = NULL;
    pthread_mutex_lock(&s->mu);
    for (struct elicit **p = &s->elicits; cJSON_IsString(id) && *p;
         p = &(*p)->next)
        if (!strcmp((*p)->id, id->valuestring)) {
            e = *p;
            *p = e->next;
            break;
        }
    char approver[96];
    snprintf(approver, sizeof(approver), "%s (MCP elicitation)",
             s->peer.client);
    pthread_mutex_unlock(&s->mu);
    if (!e) {
        log_msg("ignored a response from the client");
        return;
    }
    struct orch_gate_decision d = {
        .run = e->run, .wave = e->wave, .approver = approver};
    cJSON *edits = NULL;
    if (!mcp_elicit_decision(msg, &d, &edits)) {
        free(e); /* cancelled, or an error: the gate still waits */
        return;
    }
    struct orch_witness w = {.ledger = s->ctx->ledger,
                             .append = s->ctx->append,
                             .hook = s->ctx->append_hook};
    cJSON *out = NULL;
    struct fo_err err;
    if (orch_gate_decide(&w, &d, &out, &err) != FO_OK)
        log_msg("run %lld wave %lld: the client's decision was not taken: %s",
                (long long)e->run, (long long)e->wave, err.msg);
    cJSON_Delete(out);
    cJSON_Delete(edits);
    free(e);
}

/* Handles one message (not a batch). *reply is the reply to send, or NULL
 * for none (a notification, a response). FO_E_NOMEM when a reply is owed
 * but could not be built. */
static int handle(struct mcp *s, const cJSON *msg, cJSON **reply)
{
    *reply = NULL;
    if (!cJSON_IsObject(msg)) {
        *reply = mcp_rpc_error(NULL, SURF_MCP_INVALID_REQUEST,
                               "a message must be a JSON object");
        return *reply ? FO_OK : FO_E_NOMEM;
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
    const cJSON *jv = cJSON_GetObjectItemCaseSensitive(msg, "jsonrpc");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");

    if (id && !cJSON_IsString(id) && !cJSON_IsNumber(id)) {
        *reply = mcp_rpc_error(NULL, SURF_MCP_INVALID_REQUEST,
                               "id must be a string or a number");
    } else if (!method && (cJSON_GetObjectItemCaseSensitive(msg, "result") ||
                           cJSON_GetObjectItemCaseSensitive(msg, "error"))) {
        /* A response: to an elicitation/create of ours, or ignored */
        elicit_answer(s, msg);
        return FO_OK;
    } else if (!cJSON_IsString(jv) || strcmp(jv->valuestring, "2.0") != 0) {
        *reply = mcp_rpc_error(id, SURF_MCP_INVALID_REQUEST,
                               "jsonrpc must be \"2.0\"");
    } else if (!method) {
        *reply = mcp_rpc_error(id, SURF_MCP_INVALID_REQUEST, "missing method");
    } else if (!cJSON_IsString(method)) {
        *reply = mcp_rpc_error(id, SURF_MCP_INVALID_REQUEST,
                               "method must be a string");
    } else if (!id) {
        /* a notification: never answered */
        if (!strcmp(method->valuestring, "notifications/cancelled"))
            call_cancel(s, params);
        return FO_OK;
    } else if (params && !cJSON_IsObject(params)) {
        *reply = mcp_rpc_error(id, SURF_MCP_INVALID_PARAMS,
                               "params must be an object");
    } else if (!strcmp(method->valuestring, "initialize")) {
        pthread_mutex_lock(&s->mu);
        *reply = mcp_initialize(id, params, &s->peer);
        pthread_mutex_unlock(&s->mu);
    } else if (!strcmp(method->valuestring, "ping")) {
        *reply = mcp_rpc_result(id, cJSON_CreateObject());
    } else if (!strcmp(method->valuestring, "tools/list")) {
        *reply = mcp_tools_list(id, s->flags);
    } else if (!strcmp(method->valuestring, "tools/call")) {
        *reply = mcp_tools_call(s->ctx, s->flags, id, params);
    } else if (!strcmp(method->valuestring, "resources/list")) {
        *reply = mcp_rpc_result(id, mcp_resources_list());
    } else if (!strcmp(method->valuestring, "resources/templates/list")) {
        *reply = mcp_rpc_result(id, mcp_resource_templates());
    } else if (!strcmp(method->valuestring, "prompts/list")) {
        *reply = mcp_rpc_result(id, mcp_prompts_list());
    } else if (!strcmp(method->valuestring, "resources/read") ||
               !strcmp(method->valuestring, "prompts/get")) {
        *reply = mcp_read_or_prompt(s->ctx, id, method->valuestring, params);
    } else {
        *reply = mcp_rpc_error(id, SURF_MCP_METHOD_NOT_FOUND,
                               "method not found: %.64s", method->valuestring);
    }
    return *reply ? FO_OK : FO_E_NOMEM;
}

/* A batch (2025-03-26 only): one array of the replies, notifications left
 * out, nothing at all when every message was a notification. */
static int serve_batch_locked(struct mcp *s, const cJSON *batch,
                              struct fo_err *err)
{
    int count = 0;
    const cJSON *msg;
    fo_buf_reset(&s->out);
    if (fo_buf_putc(&s->out, '['))
        return send_locked(s, NULL, err);
    cJSON_ArrayForEach (msg, batch) {
        cJSON *reply = NULL;
        int rc = handle(s, msg, &reply);
        if (rc == FO_OK && !reply)
            continue;
        if (reply) {
            mcp_serialize(&s->tmp, reply, 0);
            cJSON_Delete(reply);
        } else {
            fo_buf_reset(&s->tmp);
            if (fo_buf_puts(&s->tmp, oom_reply))
                s->tmp.len = 0;
        }
        if (s->out.len + s->tmp.len > BATCH_BYTES_MAX) {
            /* The batch answer is full: the rest get a short error. */
            cJSON *r = mcp_rpc_error(
                cJSON_IsObject(msg)
                    ? cJSON_GetObjectItemCaseSensitive(msg, "id")
                    : NULL,
                SURF_MCP_INTERNAL_ERROR, "batch reply over 64 MiB");
            mcp_serialize(&s->tmp, r, 0);
            cJSON_Delete(r);
        }
        if (!s->tmp.len)
            continue;
        if ((count > 0 && fo_buf_putc(&s->out, ',')) ||
            fo_buf_append(&s->out, s->tmp.data, s->tmp.len))
            return send_locked(s, NULL, err);
        count++;
    }
    if (count == 0)
        return FO_OK;
    if (fo_buf_puts(&s->out, "]\n"))
        return send_locked(s, NULL, err);
    return write_all(s->out_fd, s->out.data, s->out.len, err);
}

/* A batch's calls run here, in order, with the output held. */
static int serve_batch(struct mcp *s, const cJSON *batch, struct fo_err *err)
{
    pthread_mutex_lock(&s->mu);
    int rc = serve_batch_locked(s, batch, err);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Keeps the source text FO_JSON_NUMBER_TEXT gave numbers only on the ids
 * of msg (or of each message of a batch), so no handler sees it. */
static void id_text_only(cJSON *msg, int batch)
{
    cJSON *m;
    if (cJSON_IsObject(msg)) {
        cJSON_ArrayForEach (m, msg)
            if (strcmp(m->string, "id") != 0)
                fo_json_drop_number_text(m);
    } else if (batch && cJSON_IsArray(msg)) {
        cJSON_ArrayForEach (m, msg)
            id_text_only(m, 0);
    } else {
        fo_json_drop_number_text(msg);
    }
}

/* A well-formed tools/call of a method that may take as long as a run
 * (SURF_LONG): it runs on a thread. Anything else is handled in line (and its
 * errors reported there). */
static int is_async_call(struct mcp *s, const cJSON *msg)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
    const cJSON *jv = cJSON_GetObjectItemCaseSensitive(msg, "jsonrpc");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(params, "name");
    if (!cJSON_IsObject(msg) || !(cJSON_IsString(id) || cJSON_IsNumber(id)) ||
        !cJSON_IsString(jv) || strcmp(jv->valuestring, "2.0") != 0 ||
        !cJSON_IsString(method) ||
        strcmp(method->valuestring, "tools/call") != 0 ||
        !cJSON_IsObject(params) || !cJSON_IsString(name))
        return 0;
    const struct surf_method *m = surf_find(name->valuestring);
    return m && mcp_offered(s->flags, m) && (m->flags & SURF_LONG);
}

/* Serves one line. Only a failure to write the output is returned. */
static int serve_line(struct mcp *s, const char *line, size_t len,
                      struct fo_err *err)
{
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
        i++;
    if (i == len)
        return FO_OK; /* a blank line is no message */
    cJSON *msg = NULL;
    struct fo_err e;
    cJSON *reply = NULL;
    int rc;
    int parsed =
        fo_json_parse_flags(line, len, FO_JSON_NUMBER_TEXT, &msg, &e) == FO_OK;
    if (parsed)
        id_text_only(msg, 1);
    if (!parsed) {
        reply =
            mcp_rpc_error(NULL, SURF_MCP_PARSE_ERROR, "parse error: %s", e.msg);
    } else if (cJSON_IsArray(msg)) {
        int n = cJSON_GetArraySize(msg);
        if (n == 0)
            reply =
                mcp_rpc_error(NULL, SURF_MCP_INVALID_REQUEST, "empty batch");
        else if (!s->peer.version ||
                 strcmp(s->peer.version, BATCH_VERSION) != 0)
            reply = mcp_rpc_error(NULL, SURF_MCP_INVALID_REQUEST,
                                  "batches are accepted only under protocol "
                                  "version " BATCH_VERSION);
        else if (n > BATCH_COUNT_MAX)
            reply = mcp_rpc_error(NULL, SURF_MCP_INVALID_REQUEST,
                                  "batch of more than %d messages",
                                  BATCH_COUNT_MAX);
        else {
            rc = serve_batch(s, msg, err);
            cJSON_Delete(msg);
            return rc;
        }
    } else if (is_async_call(s, msg) && call_start(s, msg) == FO_OK) {
        return FO_OK; /* answered by its thread */
    } else {
        if (handle(s, msg, &reply) == FO_OK && !reply) {
            cJSON_Delete(msg);
            return FO_OK;
        }
    }
    cJSON_Delete(msg);
    return send_reply(s, reply, err);
}

int surf_mcp_run(struct surf_ctx *ctx, int in_fd, int out_fd, unsigned flags,
                 struct fo_err *err)
{
    struct mcp s = {.ctx = ctx, .out_fd = out_fd, .flags = flags};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    struct fo_buf line;
    int discarding = 0; /* inside a line over the cap */
    int rc = FO_E_NOMEM;
    char *chunk = malloc(READ_CHUNK);

    fo_buf_init(&line, SURF_MCP_LINE_MAX);
    fo_buf_init(&s.tmp, REPLY_MAX + 1);
    fo_buf_init(&s.out, FO_BUF_UNLIMITED); /* bounded by BATCH_*_MAX */
    if (!chunk) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    for (;;) {
        ssize_t n = read(in_fd, chunk, READ_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = fo_err_set(err, FO_E_IO, "reading the input: %s",
                            strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        size_t pos = 0;
        while (pos < (size_t)n) {
            char *nl = memchr(chunk + pos, '\n', (size_t)n - pos);
            size_t seg = nl ? (size_t)(nl - (chunk + pos)) : (size_t)n - pos;
            if (!discarding) {
                int arc = fo_buf_append(&line, chunk + pos, seg);
                if (arc != FO_OK) {
                    discarding = 1;
                    fo_buf_release(&line);
                    rc = send_reply(
                        &s,
                        mcp_rpc_error(NULL, SURF_MCP_INVALID_REQUEST, "%s",
                                      arc == FO_E_TOO_LARGE
                                          ? "line over 4 MiB: skipped"
                                          : "out of memory reading a line"),
                        err);
                    if (rc)
                        goto out;
                }
            }
            pos += seg;
            if (nl) {
                pos++;
                if (discarding) {
                    discarding = 0;
                } else {
                    rc = serve_line(&s, line.data, line.len, err);
                    if (rc)
                        goto out;
                }
                fo_buf_reset(&line);
            }
        }
    }
    if (!discarding && line.len > 0) {
        rc = serve_line(&s, line.data, line.len, err);
        if (rc)
            goto out;
    }
    rc = FO_OK;
out:
    /* The end of input (a client that closed its side, or a file of
     * requests read to its end): every call still running is answered
     * before the process exits. */
    pthread_mutex_lock(&s.mu);
    while (s.n_calls > 0)
        pthread_cond_wait(&s.cv, &s.mu);
    pthread_mutex_unlock(&s.mu);
    while (s.elicits) {
        struct elicit *e = s.elicits;
        s.elicits = e->next;
        free(e);
    }
    if (rc == FO_OK && s.out_failed) {
        *err = s.out_err;
        rc = err->code;
    }
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    fo_buf_release(&s.out);
    fo_buf_release(&s.tmp);
    fo_buf_release(&line);
    free(chunk);
    return rc;
}
