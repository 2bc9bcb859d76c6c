/* orch_mcpc: the MCP client of forum (orch_mcpc.h). */
#include "daemon/orch_mcpc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "daemon/orch_mcph.h"
#include "daemon/orch_types_int.h"
#include "ledger/fo_json.h"
#include "ledger/fo_version.h"

#define NAME_MAX_LEN 32
#define PROTOCOL_VERSION "2025-06-18"

enum { S_DOWN, S_INIT, S_LIST, S_READY };
enum { OP_READY, OP_CALL };

struct srv;

struct orch_mcpc_op {
    struct orch_mcpc *m;
    struct srv *s;
    int kind;
    int sent;
    int cancel_sent; /* notifications/cancelled went to the server */
    int64_t id;
    orch_mcpc_done_fn done; /* NULL once cancelled */
    void *arg;
    struct event *timer;
    char *tool; /* the server's own name of the tool */
    cJSON *args;
    struct orch_mcpc_op *next;
};

struct srv {
    char name[NAME_MAX_LEN + 1];
    const cJSON *cfg;
    int timeout_s;
    int state;
    pid_t pid;
    struct bufferevent *bev;
    struct orch_mcph *h; /* a Streamable HTTP server's transport */
    int64_t init_id, list_id;
    cJSON *tools;
    char err[FO_ERR_MSG_MAX];
    struct orch_mcpc_op *ops;
};

struct orch_mcpc {
    struct event_base *base;
    /* orch_mcpc_close: DELETEs out, and who waits for them */
    size_t closing;
    struct event *close_timer;
    void (*closed)(void *arg);
    void *closed_arg;
    cJSON *cfg; /* the servers object, copied */
    struct srv s[ORCH_MCPC_SERVERS_MAX];
    size_t n;
    int64_t next_id;
};

static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > NAME_MAX_LEN)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_' || s[i] == '-'))
            return 0;
    return 1;
}

int orch_mcpc_check(const cJSON *servers, struct fo_err *err)
{
    if (!servers)
        return FO_OK;
    if (!cJSON_IsObject(servers) ||
        cJSON_GetArraySize(servers) > ORCH_MCPC_SERVERS_MAX)
        return fo_err_set(err, FO_E_INVALID,
                          "mcp_servers: must be an object of at most %d "
                          "servers",
                          ORCH_MCPC_SERVERS_MAX);
    const cJSON *s;
    cJSON_ArrayForEach (s, servers) {
        const char *n = s->string;
        if (!name_ok(n))
            return fo_err_set(err, FO_E_INVALID,
                              "mcp_servers: \"%s\": a name is 1-32 of "
                              "[a-z0-9_-]",
                              n);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(s, "command");
        const cJSON *url = cJSON_GetObjectItemCaseSensitive(s, "url");
        if (!cJSON_IsObject(s) || (c && url) ||
            !((cJSON_IsString(c) && c->valuestring[0]) || url))
            return fo_err_set(err, FO_E_INVALID,
                              "mcp_servers.%s: needs \"command\" (a program "
                              "speaking MCP on stdio) or \"url\" (a "
                              "Streamable HTTP endpoint), not both",
                              n);
        if (url) {
            int rc = orch_mcph_check(n, s, err);
            if (rc)
                return rc;
            const cJSON *k;
            cJSON_ArrayForEach (k, s)
                if (strcmp(k->string, "url") && strcmp(k->string, "headers") &&
                    strcmp(k->string, "token_env") &&
                    strcmp(k->string, "ca_file") &&
                    strcmp(k->string, "timeout_s"))
                    return fo_err_set(
                        err, FO_E_INVALID,
                        "mcp_servers.%s: unknown field \"%s\"%s", n, k->string,
                        strcmp(k->string, "args") && strcmp(k->string, "env")
                            ? ""
                            : " (a url server runs no program)");
        }
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(s, "args"), *x;
        if (a && !cJSON_IsArray(a))
            return fo_err_set(err, FO_E_INVALID,
                              "mcp_servers.%s.args: must be a list of strings",
                              n);
        cJSON_ArrayForEach (x, a)
            if (!cJSON_IsString(x))
                return fo_err_set(err, FO_E_INVALID,
                                  "mcp_servers.%s.args: must be a list of "
                                  "strings",
                                  n);
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "env");
        if (e && !cJSON_IsObject(e))
            return fo_err_set(err, FO_E_INVALID,
                              "mcp_servers.%s.env: must be an object of "
                              "strings",
                              n);
        cJSON_ArrayForEach (x, e)
            if (!cJSON_IsString(x) || strchr(x->string, '='))
                return fo_err_set(err, FO_E_INVALID,
                                  "mcp_servers.%s.env: must be an object of "
                                  "strings",
                                  n);
        long long t = 0;
        int g = fo_json_get_int(s, "timeout_s", 1, 3600, &t);
        if (g != FO_OK && g != FO_E_NOT_FOUND)
            return fo_err_set(err, FO_E_INVALID,
                              "mcp_servers.%s.timeout_s: 1-3600", n);
        const cJSON *k, *fields = url ? NULL : s; /* a url's: above */
        cJSON_ArrayForEach (k, fields)
            if (strcmp(k->string, "command") && strcmp(k->string, "args") &&
                strcmp(k->string, "env") && strcmp(k->string, "timeout_s"))
                return fo_err_set(err, FO_E_INVALID,
                                  "mcp_servers.%s: unknown field \"%s\"", n,
                                  k->string);
    }
    return FO_OK;
}

static void http_msg(void *arg, cJSON *msg);
static void http_fail(void *arg, int64_t id, int fatal,
                      const struct fo_err *err);

int orch_mcpc_create(const cJSON *servers, struct event_base *base,
                     struct orch_mcpc **out, struct fo_err *err)
{
    int rc = orch_mcpc_check(servers, err);
    if (rc)
        return rc;
    struct orch_mcpc *m = calloc(1, sizeof(*m));
    if (!m || (servers && !(m->cfg = cJSON_Duplicate(servers, 1)))) {
        free(m);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    m->base = base;
    m->next_id = 1;
    const cJSON *s;
    cJSON_ArrayForEach (s, m->cfg) {
        struct srv *v = &m->s[m->n++];
        snprintf(v->name, sizeof(v->name), "%s", s->string);
        v->cfg = s;
        long long t = ORCH_MCPC_TIMEOUT_S_DEFAULT;
        fo_json_get_int(s, "timeout_s", 1, 3600, &t);
        v->timeout_s = (int)t;
        v->pid = -1;
        if (cJSON_GetObjectItemCaseSensitive(s, "url")) {
            rc = orch_mcph_create(v->name, s, v->timeout_s, base, http_msg,
                                  http_fail, v, &v->h, err);
            if (rc) {
                orch_mcpc_free(m);
                return rc;
            }
        }
    }
    *out = m;
    return FO_OK;
}

static long find_i(const struct orch_mcpc *m, const char *name, size_t len)
{
    for (size_t i = 0; m && i < m->n; i++)
        if (strlen(m->s[i].name) == len && !memcmp(m->s[i].name, name, len))
            return (long)i;
    return -1;
}

static struct srv *find(struct orch_mcpc *m, const char *name, size_t len)
{
    long i = find_i(m, name, len);
    return i < 0 ? NULL : &m->s[i];
}

static const struct srv *find_c(const struct orch_mcpc *m, const char *name,
                                size_t len)
{
    long i = find_i(m, name, len);
    return i < 0 ? NULL : &m->s[i];
}

int orch_mcpc_has(const struct orch_mcpc *m, const char *server)
{
    return server && find_c(m, server, strlen(server)) != NULL;
}

int orch_mcpc_is_ready(const struct orch_mcpc *m, const char *server)
{
    const struct srv *s = server ? find_c(m, server, strlen(server)) : NULL;
    return s && s->state == S_READY;
}

const char *orch_mcpc_error(const struct orch_mcpc *m, const char *server)
{
    const struct srv *s = server ? find_c(m, server, strlen(server)) : NULL;
    return s && s->err[0] ? s->err : NULL;
}

/* ---- operations -------------------------------------------------------------
 */

static void op_free(struct orch_mcpc_op *op)
{
    if (op->timer)
        event_free(op->timer);
    free(op->tool);
    cJSON_Delete(op->args);
    free(op);
}

static void op_unlink(struct orch_mcpc_op *op)
{
    struct orch_mcpc_op **p = &op->s->ops;
    while (*p && *p != op)
        p = &(*p)->next;
    if (*p)
        *p = op->next;
}

/* Takes back an op that was never started (done is not called): rc. */
static int op_drop(struct orch_mcpc_op *op, int rc)
{
    op_unlink(op);
    op_free(op);
    return rc;
}

/* Ends op: unlinks it, calls done (unless cancelled), frees it. */
static void op_end_with(struct orch_mcpc_op *op, int rc, const char *text,
                        int is_error, const cJSON *attach,
                        const struct fo_err *err)
{
    op_unlink(op);
    orch_mcpc_done_fn done = op->done;
    void *arg = op->arg;
    op_free(op);
    if (done)
        done(arg, rc, text, is_error, attach, err);
}

static void op_end(struct orch_mcpc_op *op, int rc, const char *text,
                   int is_error, const struct fo_err *err)
{
    op_end_with(op, rc, text, is_error, NULL, err);
}

static void srv_stop(struct srv *s, const char *why);
static int send_msg(struct srv *s, cJSON *msg, struct fo_err *err);
static cJSON *request(int64_t id, const char *method, cJSON *params);

/* Tells the server that forum no longer waits for the call op sent
 * (notifications/cancelled): it may stop the work. What it answers later
 * is dropped (no op has that id). Once a call. */
static void send_cancelled(struct orch_mcpc_op *op, const char *reason)
{
    if (op->kind != OP_CALL || !op->sent || op->cancel_sent ||
        op->s->state != S_READY)
        return;
    op->cancel_sent = 1;
    cJSON *p = cJSON_CreateObject();
    if (!p || !fo_json_add_int(p, "requestId", op->id) ||
        !cJSON_AddStringToObject(p, "reason", reason)) {
        cJSON_Delete(p);
        return; /* out of memory: the server finishes the call unasked */
    }
    struct fo_err err;
    send_msg(op->s, request(0, "notifications/cancelled", p), &err);
}

static void on_op_timer(evutil_socket_t fd, short what, void *arg)
{
    struct orch_mcpc_op *op = arg;
    (void)fd, (void)what;
    struct fo_err err;
    if (op->kind == OP_READY && op->s->state != S_READY) {
        char why[FO_ERR_MSG_MAX];
        snprintf(why, sizeof(why),
                 "MCP server %s: not ready within %d s (initialize and "
                 "tools/list)",
                 op->s->name, op->s->timeout_s);
        srv_stop(op->s, why); /* ends op too */
        return;
    }
    fo_err_set(&err, FO_E_TIMEOUT, "MCP server %s: %s took over %d s",
               op->s->name, op->tool ? op->tool : "a request",
               op->s->timeout_s);
    send_cancelled(op, "timed out");
    op_end(op, FO_E_TIMEOUT, NULL, 0, &err);
}

static struct orch_mcpc_op *op_new(struct orch_mcpc *m, struct srv *s, int kind,
                                   orch_mcpc_done_fn done, void *arg)
{
    struct orch_mcpc_op *op = calloc(1, sizeof(*op));
    if (!op)
        return NULL;
    *op = (struct orch_mcpc_op){
        .m = m, .s = s, .kind = kind, .done = done, .arg = arg};
    op->timer = evtimer_new(m->base, on_op_timer, op);
    struct timeval tv = {.tv_sec = s->timeout_s};
    if (!op->timer || evtimer_add(op->timer, &tv) != 0) {
        op_free(op);
        return NULL;
    }
    op->next = s->ops;
    s->ops = op;
    return op;
}

void orch_mcpc_cancel(struct orch_mcpc_op *op)
{
    if (!op)
        return;
    op->done = NULL;
    send_cancelled(op, "the run was cancelled");
    if (!op->sent || op->kind == OP_READY) { /* nothing to wait for */
        op_unlink(op);
        op_free(op);
    }
    /* a call sent stays until its answer (or the server's end), unseen */
}

/* ---- the server process
 * ------------------------------------------------------ */

/* Sends msg (taken; NULL: out of memory). An error is in err. */
static int send_msg(struct srv *s, cJSON *msg, struct fo_err *err)
{
    if (!msg)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    if (s->h) /* POSTed; what goes wrong later comes to http_fail */
        return orch_mcph_post(s->h, msg, NULL, err);
    char *t = cJSON_PrintUnformatted(msg);
    cJSON_Delete(msg);
    if (!t)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc =
        bufferevent_write(s->bev, t, strlen(t)) == 0 &&
                bufferevent_write(s->bev, "\n", 1) == 0
            ? FO_OK
            : fo_err_set(err, FO_E_IO, "MCP server %s: cannot send", s->name);
    free(t);
    return rc;
}

static cJSON *request(int64_t id, const char *method, cJSON *params)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "jsonrpc", "2.0") ||
        (id && !fo_json_add_int(o, "id", id)) ||
        !cJSON_AddStringToObject(o, "method", method) ||
        (params && !cJSON_AddItemToObject(o, "params", params))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Stops the server: its calls and waiters fail with why. */
static void srv_stop(struct srv *s, const char *why)
{
    orch_mcph_reset(s->h); /* its POSTs in flight, and the session */
    if (s->bev) {
        bufferevent_free(s->bev);
        s->bev = NULL;
    }
    if (s->pid > 0) {
        kill(-s->pid, SIGKILL);
        kill(s->pid, SIGKILL);
        while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
            ;
        s->pid = -1;
    }
    s->state = S_DOWN;
    cJSON_Delete(s->tools);
    s->tools = NULL;
    snprintf(s->err, sizeof(s->err), "%s", why);
    struct fo_err err;
    fo_err_set(&err, FO_E_UNAVAILABLE, "%s", why);
    while (s->ops) /* a done may start the server again: ops are re-read */
        op_end(s->ops, FO_E_UNAVAILABLE, NULL, 0, &err);
}

/* Sends op's tools/call. FO_OK, or an error and op is unchanged. */
/* 1 when the server's tools/list named tool. */
static int srv_lists(const struct srv *s, const char *tool)
{
    const cJSON *t;
    cJSON_ArrayForEach (t, s->tools) {
        const cJSON *name = cJSON_GetObjectItem(t, "name");
        if (cJSON_IsString(name) && !strcmp(name->valuestring, tool))
            return 1;
    }
    return 0;
}

static int send_call(struct srv *s, struct orch_mcpc_op *op, struct fo_err *err)
{
    /* a roster may name a tool the server does not offer: refused here,
     * never forwarded for the server to run whatever it makes of it */
    if (!srv_lists(s, op->tool))
        return fo_err_set(err, FO_E_NOT_FOUND,
                          "MCP server %s: no tool \"%.64s\" in its "
                          "tools/list",
                          s->name, op->tool);
    cJSON *p = cJSON_CreateObject();
    if (!p || !cJSON_AddStringToObject(p, "name", op->tool) ||
        !cJSON_AddItemToObject(p, "arguments",
                               op->args ? cJSON_Duplicate(op->args, 1)
                                        : cJSON_CreateObject())) {
        cJSON_Delete(p);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    int64_t id = op->m->next_id++;
    int rc = send_msg(s, request(id, "tools/call", p), err);
    if (rc)
        return rc;
    op->id = id;
    op->sent = 1;
    return FO_OK;
}

static void became_ready(struct srv *s)
{
    s->state = S_READY;
    s->err[0] = '\0';
    struct orch_mcpc_op *op = s->ops, *next;
    for (; op; op = next) { /* calls first: their ops stay */
        next = op->next;
        struct fo_err err;
        if (op->kind == OP_CALL && !op->sent && send_call(s, op, &err))
            op_end(op, err.code, NULL, 0, &err);
    }
    for (int again = 1; again;) {
        again = 0;
        for (op = s->ops; op; op = op->next)
            if (op->kind == OP_READY) {
                op_end(op, FO_OK, NULL, 0, NULL);
                again = 1;
                break;
            }
    }
}

/* s if it is a string, else "". */
static const char *str_or(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* Copies the string members keys of from into a new object for attach
 * (at least the type); NULL when out of memory. */
static cJSON *attach_item(cJSON *attach, const cJSON *from, const char *type,
                          const char *const *keys, size_t n)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddItemToArray(attach, o);
    if (!cJSON_AddStringToObject(o, "type", type))
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(from, keys[i]);
        if (cJSON_IsString(v) &&
            !cJSON_AddStringToObject(o, keys[i], v->valuestring))
            return NULL;
    }
    return o;
}

/* One content item of a tools/call result into b (its text, or a line
 * naming it) and, when it is not text, into attach. */
static int content_item(const cJSON *c, struct fo_buf *b, cJSON *attach)
{
    const char *type = str_or(c, "type");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(c, "text");
    if (!strcmp(type, "text") && cJSON_IsString(text))
        return fo_buf_puts(b, text->valuestring);
    if (!strcmp(type, "image") || !strcmp(type, "audio")) {
        static const char *const k[] = {"mimeType", "data"};
        if (!attach_item(attach, c, type, k, 2))
            return FO_E_NOMEM;
        return fo_buf_printf(b,
                             "[%s %.100s, %zu bytes (base64) on the "
                             "ledger]",
                             type, str_or(c, "mimeType"),
                             strlen(str_or(c, "data")));
    }
    if (!strcmp(type, "resource_link")) {
        static const char *const k[] = {"uri", "name", "mimeType",
                                        "description"};
        if (!attach_item(attach, c, type, k, 4))
            return FO_E_NOMEM;
        return fo_buf_printf(b, "[resource_link %.200s %.1000s %.100s]",
                             str_or(c, "name"), str_or(c, "uri"),
                             str_or(c, "mimeType"));
    }
    if (!strcmp(type, "resource")) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(c, "resource");
        const cJSON *rt = cJSON_GetObjectItemCaseSensitive(r, "text");
        if (cJSON_IsString(rt))
            return fo_buf_printf(b, "[resource %.1000s]\n", str_or(r, "uri")) ||
                   fo_buf_puts(b, rt->valuestring);
        static const char *const k[] = {"uri", "mimeType", "blob"};
        if (!attach_item(attach, r, type, k, 3))
            return FO_E_NOMEM;
        return fo_buf_printf(b,
                             "[resource %.1000s %.100s, %zu bytes (base64) "
                             "on the ledger]",
                             str_or(r, "uri"), str_or(r, "mimeType"),
                             strlen(str_or(r, "blob")));
    }
    return fo_buf_printf(b, "[%.40s content]", type[0] ? type : "other");
}

/* The text of a tools/call result: its content items, one per line; what
 * is not text also into *attach (NULL when nothing). NULL: out of
 * memory. */
static char *result_text(const cJSON *res, int *is_error, cJSON **attach)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    const cJSON *c, *content = cJSON_GetObjectItemCaseSensitive(res, "content");
    *is_error = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "isError"));
    *attach = cJSON_CreateArray();
    int n = 0, rc = *attach ? FO_OK : FO_E_NOMEM;
    cJSON_ArrayForEach (c, content) {
        if (rc || (n++ && (rc = fo_buf_putc(&b, '\n'))))
            break;
        rc = content_item(c, &b, *attach);
    }
    char *s = rc ? NULL : fo_buf_detach(&b, NULL);
    fo_buf_release(&b);
    if (!rc && !s)
        s = orch_strdup("");
    if (!s || !cJSON_GetArraySize(*attach)) {
        cJSON_Delete(*attach);
        *attach = NULL;
    }
    return s;
}

static void on_message(struct srv *s, cJSON *msg)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(msg, "result");
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(msg, "error");
    char why[FO_ERR_MSG_MAX];
    if (cJSON_IsString(method)) { /* a request or notification to us */
        if (id) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "jsonrpc", "2.0");
            cJSON_AddItemToObject(r, "id", cJSON_Duplicate(id, 1));
            if (!strcmp(method->valuestring, "ping")) {
                cJSON_AddItemToObject(r, "result", cJSON_CreateObject());
            } else {
                cJSON *e = cJSON_AddObjectToObject(r, "error");
                fo_json_add_int(e, "code", -32601);
                cJSON_AddStringToObject(e, "message", "method not found");
            }
            struct fo_err ignore; /* the server asks again, or gives up */
            send_msg(s, r, &ignore);
        }
        return;
    }
    if (!cJSON_IsNumber(id)) {
        snprintf(why, sizeof(why),
                 "MCP server %s: an answer without a numeric id", s->name);
        srv_stop(s, why);
        return;
    }
    int64_t n = (int64_t)id->valuedouble;
    if (n == s->init_id && s->state == S_INIT) {
        if (!cJSON_IsObject(res)) {
            snprintf(why, sizeof(why), "MCP server %s: initialize failed",
                     s->name);
            srv_stop(s, why);
            return;
        }
        cJSON *note = request(0, "notifications/initialized", NULL);
        s->list_id = s->init_id + 1; /* reserved with initialize's */
        cJSON *list = request(s->list_id, "tools/list", cJSON_CreateObject());
        struct fo_err serr;
        int rc;
        if (!note || !list) {
            cJSON_Delete(note);
            cJSON_Delete(list);
            rc = fo_err_set(&serr, FO_E_NOMEM, NULL);
        } else if (s->h) { /* the list once the server took the note */
            const cJSON *v =
                cJSON_GetObjectItemCaseSensitive(res, "protocolVersion");
            orch_mcph_set_version(s->h, cJSON_IsString(v) ? v->valuestring
                                                          : PROTOCOL_VERSION);
            rc = orch_mcph_post(s->h, note, list, &serr);
        } else {
            rc = send_msg(s, note, &serr);
            rc = rc ? (cJSON_Delete(list), rc) : send_msg(s, list, &serr);
        }
        if (rc) {
            snprintf(why, sizeof(why), "%s", serr.msg);
            srv_stop(s, why);
            return;
        }
        s->state = S_LIST;
        return;
    }
    if (n == s->list_id && s->state == S_LIST) {
        const cJSON *tools =
            cJSON_IsObject(res) ? cJSON_GetObjectItemCaseSensitive(res, "tools")
                                : NULL;
        const cJSON *t;
        int ok = cJSON_IsArray(tools);
        cJSON_ArrayForEach (t, tools)
            ok = ok && cJSON_IsString(cJSON_GetObjectItem(t, "name"));
        if (!ok) {
            snprintf(why, sizeof(why),
                     "MCP server %s: tools/list did not answer a list of "
                     "named tools",
                     s->name);
            srv_stop(s, why);
            return;
        }
        cJSON_Delete(s->tools);
        s->tools = cJSON_Duplicate(tools, 1);
        became_ready(s);
        return;
    }
    struct orch_mcpc_op *op = s->ops;
    while (op && !(op->kind == OP_CALL && op->sent && op->id == n))
        op = op->next;
    if (!op)
        return; /* an answer to a cancelled or timed-out call */
    struct fo_err err;
    if (cJSON_IsObject(error) || !cJSON_IsObject(res)) {
        /* the server refused the request: its error, not the tool's
         * (a tool's own failure is a result with isError) */
        const cJSON *em = cJSON_GetObjectItemCaseSensitive(error, "message");
        const cJSON *ec = cJSON_GetObjectItemCaseSensitive(error, "code");
        if (cJSON_IsObject(error))
            fo_err_set(&err, FO_E_UPSTREAM,
                       "MCP server %s: the server answered tools/call %s "
                       "with a JSON-RPC error%s%.0f (the server's, not the "
                       "tool's): %s",
                       s->name, op->tool, cJSON_IsNumber(ec) ? " " : "",
                       cJSON_IsNumber(ec) ? ec->valuedouble : 0.0,
                       cJSON_IsString(em) ? em->valuestring : "no message");
        else
            fo_err_set(&err, FO_E_UPSTREAM,
                       "MCP server %s: tools/call %s: an answer without a "
                       "result object",
                       s->name, op->tool);
        op_end(op, FO_E_UPSTREAM, NULL, 0, &err);
        return;
    }
    int is_error = 0;
    cJSON *attach = NULL;
    char *text = result_text(res, &is_error, &attach);
    if (!text) {
        fo_err_set(&err, FO_E_NOMEM, NULL);
        op_end(op, FO_E_NOMEM, NULL, 0, &err);
        return;
    }
    op_end_with(op, FO_OK, text, is_error, attach, NULL);
    cJSON_Delete(attach);
    free(text);
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct srv *s = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    char why[FO_ERR_MSG_MAX];
    for (;;) {
        size_t n = 0;
        char *line = evbuffer_readln(in, &n, EVBUFFER_EOL_LF);
        if (!line) {
            if (evbuffer_get_length(in) > ORCH_MCPC_LINE_MAX) {
                snprintf(why, sizeof(why),
                         "MCP server %s: a message over %u bytes", s->name,
                         ORCH_MCPC_LINE_MAX);
                srv_stop(s, why);
            }
            return;
        }
        if (n == 0 || (n == 1 && line[0] == '\r')) {
            free(line);
            continue;
        }
        cJSON *msg = NULL;
        struct fo_err perr;
        int rc = fo_json_parse(line, n, &msg, &perr);
        free(line);
        if (rc || !cJSON_IsObject(msg)) {
            cJSON_Delete(msg);
            snprintf(why, sizeof(why),
                     "MCP server %s: answered garbage (not a JSON-RPC "
                     "message: %.120s)",
                     s->name, rc ? perr.msg : "not an object");
            srv_stop(s, why);
            return;
        }
        struct bufferevent *was = s->bev;
        on_message(s, msg);
        cJSON_Delete(msg);
        if (s->bev != was) /* stopped (and maybe started again) */
            return;
    }
}

/* A message a Streamable HTTP server sent (from the loop). */
static void http_msg(void *arg, cJSON *msg)
{
    on_message(arg, msg);
}

/* A POST to a Streamable HTTP server failed: the call it carried fails;
 * before the server is ready, or when the session is no good, the server
 * stops (its calls fail) and the next use starts a new session. */
static void http_fail(void *arg, int64_t id, int fatal,
                      const struct fo_err *err)
{
    struct srv *s = arg;
    if (fatal || s->state != S_READY) {
        char why[FO_ERR_MSG_MAX];
        snprintf(why, sizeof(why), "%s", err->msg);
        srv_stop(s, why);
        return;
    }
    struct orch_mcpc_op *op = s->ops;
    while (op && !(op->kind == OP_CALL && op->sent && op->id == id))
        op = op->next;
    if (op && id)
        op_end(op, err->code, NULL, 0, err);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct srv *s = arg;
    (void)bev;
    char why[FO_ERR_MSG_MAX];
    snprintf(why, sizeof(why), "MCP server %.32s: %s", s->name,
             what & BEV_EVENT_EOF ? "exited" : "connection error");
    srv_stop(s, why);
}

/* Sends initialize (tools/list's id is reserved with it). */
static int send_init(struct orch_mcpc *m, struct srv *s, struct fo_err *err)
{
    s->init_id = m->next_id;
    m->next_id += 2; /* initialize, then tools/list */
    cJSON *p = cJSON_CreateObject();
    cJSON *ci = p ? cJSON_AddObjectToObject(p, "clientInfo") : NULL;
    if (!ci ||
        !cJSON_AddStringToObject(p, "protocolVersion", PROTOCOL_VERSION) ||
        !cJSON_AddObjectToObject(p, "capabilities") ||
        !cJSON_AddStringToObject(ci, "name", "forum") ||
        !cJSON_AddStringToObject(ci, "version", FO_VERSION)) {
        cJSON_Delete(p);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    int rc = send_msg(s, request(s->init_id, "initialize", p), err);
    if (!rc)
        s->state = S_INIT;
    return rc;
}

static int srv_start(struct orch_mcpc *m, struct srv *s, struct fo_err *err)
{
    if (s->h) { /* a Streamable HTTP server: its session begins */
        int rc = send_init(m, s, err);
        if (rc)
            snprintf(s->err, sizeof(s->err), "%s", err->msg);
        return rc;
    }
    int sv[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return fo_err_set(err, FO_E_IO, "MCP server %s: socketpair: %s",
                          s->name, strerror(errno));
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(s->cfg, "command");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(s->cfg, "args");
    const cJSON *envo = cJSON_GetObjectItemCaseSensitive(s->cfg, "env"), *x;
    size_t na = (size_t)cJSON_GetArraySize(args);
    size_t ne = (size_t)cJSON_GetArraySize(envo);
    char **argv = calloc(na + 2, sizeof(char *));
    char **env = calloc(ne + 4, sizeof(char *));
    char path[4096], home[4096];
    size_t k = 0;
    int rc = FO_OK;
    if (!argv || !env) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    argv[0] = cmd->valuestring;
    size_t i = 1;
    cJSON_ArrayForEach (x, args)
        argv[i++] = x->valuestring;
    /* a PATH or HOME that does not fit is not cut (a cut PATH finds the
     * wrong program): the server gets the defaults instead */
    const char *pv = getenv("PATH"), *hv = getenv("HOME");
    int pn = snprintf(path, sizeof(path), "PATH=%s", pv ? pv : "/usr/bin:/bin");
    if (pn < 0 || (size_t)pn >= sizeof(path))
        snprintf(path, sizeof(path), "PATH=/usr/bin:/bin");
    int hn = snprintf(home, sizeof(home), "HOME=%s", hv ? hv : "/");
    if (hn < 0 || (size_t)hn >= sizeof(home))
        snprintf(home, sizeof(home), "HOME=/");
    env[k++] = path;
    env[k++] = home;
    static char lang[] = "LANG=C.UTF-8";
    env[k++] = lang;
    cJSON_ArrayForEach (x, envo) {
        size_t l = strlen(x->string) + strlen(x->valuestring) + 2;
        char *e = malloc(l);
        if (!e) {
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
            goto out;
        }
        snprintf(e, l, "%s=%s", x->string, x->valuestring);
        env[k++] = e;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigfillset(&dfl);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP |
                                      POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    pid_t pid = -1;
    int e = posix_spawnp(&pid, argv[0], &fa, &at, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (e) {
        rc = fo_err_set(err, FO_E_NOT_FOUND,
                        "MCP server %s: cannot run \"%s\": %s", s->name,
                        argv[0], strerror(e));
        goto out;
    }
    close(sv[1]);
    sv[1] = -1;
    evutil_make_socket_nonblocking(sv[0]);
    s->bev = bufferevent_socket_new(m->base, sv[0], BEV_OPT_CLOSE_ON_FREE);
    if (!s->bev) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    sv[0] = -1;
    s->pid = pid;
    bufferevent_setcb(s->bev, on_read, NULL, on_event, s);
    bufferevent_enable(s->bev, EV_READ);
    rc = send_init(m, s, err);
out:
    if (sv[0] >= 0)
        close(sv[0]);
    if (sv[1] >= 0)
        close(sv[1]);
    for (size_t j = 3; env && j < k; j++)
        free(env[j]);
    free(env);
    free(argv);
    if (rc && s->bev) {
        char why[FO_ERR_MSG_MAX];
        snprintf(why, sizeof(why), "%s", err->msg);
        srv_stop(s, why);
    }
    if (rc)
        snprintf(s->err, sizeof(s->err), "%s", err->msg);
    return rc;
}

/* ---- the API
 * -------------------------------------------------------------------- */

static void on_ready_now(evutil_socket_t fd, short what, void *arg)
{
    struct orch_mcpc_op *op = arg;
    (void)fd, (void)what;
    op_end(op, FO_OK, NULL, 0, NULL);
}

int orch_mcpc_ready(struct orch_mcpc *m, const char *server,
                    orch_mcpc_done_fn done, void *arg,
                    struct orch_mcpc_op **out, struct fo_err *err)
{
    struct srv *s = server ? find(m, server, strlen(server)) : NULL;
    if (!s)
        return fo_err_set(err, FO_E_NOT_FOUND, "no MCP server %s is configured",
                          server ? server : "");
    struct orch_mcpc_op *op = op_new(m, s, OP_READY, done, arg);
    if (!op)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    if (s->state == S_READY) { /* answered from the loop, never inside */
        event_free(op->timer);
        op->timer = evtimer_new(m->base, on_ready_now, op);
        if (!op->timer)
            return op_drop(op, fo_err_set(err, FO_E_NOMEM, NULL));
        event_active(op->timer, EV_TIMEOUT, 0);
    } else if (s->state == S_DOWN) {
        int rc = srv_start(m, s, err);
        if (rc)
            return op_drop(op, rc);
    }
    *out = op;
    return FO_OK;
}

cJSON *orch_mcpc_tool(const struct orch_mcpc *m, const char *full)
{
    const char *dot = full ? strchr(full, '.') : NULL;
    const struct srv *s = dot ? find_c(m, full, (size_t)(dot - full)) : NULL;
    if (!s || s->state != S_READY)
        return NULL;
    const cJSON *t;
    cJSON_ArrayForEach (t, s->tools) {
        const cJSON *name = cJSON_GetObjectItem(t, "name");
        if (strcmp(name->valuestring, dot + 1))
            continue;
        const cJSON *d = cJSON_GetObjectItem(t, "description");
        const cJSON *sch = cJSON_GetObjectItem(t, "inputSchema");
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddStringToObject(o, "name", full) ||
            !cJSON_AddStringToObject(o, "description",
                                     cJSON_IsString(d) ? d->valuestring : "") ||
            !cJSON_AddItemToObject(
                o, "input_schema",
                cJSON_IsObject(sch) ? cJSON_Duplicate(sch, 1)
                                    : cJSON_Parse("{\"type\":\"object\"}"))) {
            cJSON_Delete(o);
            return NULL;
        }
        return o;
    }
    return NULL;
}

int orch_mcpc_call(struct orch_mcpc *m, const char *full, const cJSON *args,
                   orch_mcpc_done_fn done, void *arg, struct orch_mcpc_op **out,
                   struct fo_err *err)
{
    const char *dot = full ? strchr(full, '.') : NULL;
    struct srv *s = dot ? find(m, full, (size_t)(dot - full)) : NULL;
    if (!s)
        return fo_err_set(err, FO_E_NOT_FOUND, "no MCP server for tool %s",
                          full ? full : "");
    struct orch_mcpc_op *op = op_new(m, s, OP_CALL, done, arg);
    if (!op || !(op->tool = orch_strdup(dot + 1)) ||
        (args && !(op->args = cJSON_Duplicate(args, 1)))) {
        return op ? op_drop(op, fo_err_set(err, FO_E_NOMEM, NULL))
                  : fo_err_set(err, FO_E_NOMEM, NULL);
    }
    if (s->state == S_READY) {
        int rc = send_call(s, op, err);
        if (rc)
            return op_drop(op, rc);
        *out = op;
        return FO_OK;
    }
    if (s->state == S_DOWN) {
        int rc = srv_start(m, s, err);
        if (rc)
            return op_drop(op, rc);
    }
    *out = op;
    return FO_OK;
}

/* The last DELETE was answered, or the time is up: done, once. */
static void close_done(struct orch_mcpc *m)
{
    void (*fn)(void *) = m->closed;
    m->closed = NULL;
    m->closing = 0;
    if (m->close_timer)
        event_del(m->close_timer);
    if (fn)
        fn(m->closed_arg);
}

static void on_session_closed(void *arg)
{
    struct orch_mcpc *m = arg;
    if (m->closing && --m->closing == 0)
        close_done(m);
}

static void on_close_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    close_done(arg);
}

int orch_mcpc_close(struct orch_mcpc *m, void (*done)(void *arg), void *arg)
{
    if (!m || m->closed)
        return 0;
    if (!m->close_timer &&
        !(m->close_timer = evtimer_new(m->base, on_close_timer, m)))
        return 0; /* out of memory: the servers end their sessions */
    m->closed = done;
    m->closed_arg = arg;
    m->closing = 0;
    for (size_t i = 0; i < m->n; i++)
        m->closing +=
            (size_t)orch_mcph_end_session(m->s[i].h, on_session_closed, m);
    if (!m->closing) {
        m->closed = NULL;
        return 0;
    }
    struct timeval tv = {ORCH_MCPC_CLOSE_MS / 1000,
                         (ORCH_MCPC_CLOSE_MS % 1000) * 1000};
    evtimer_add(m->close_timer, &tv);
    return 1;
}

void orch_mcpc_free(struct orch_mcpc *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        struct srv *s = &m->s[i];
        while (s->ops) { /* no callbacks */
            struct orch_mcpc_op *op = s->ops;
            s->ops = op->next;
            op_free(op);
        }
        srv_stop(s, "stopping");
        orch_mcph_free(s->h);
    }
    if (m->close_timer)
        event_free(m->close_timer);
    cJSON_Delete(m->cfg);
    free(m);
}
