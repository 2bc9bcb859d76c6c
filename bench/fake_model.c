/* fake_model: an OpenAI-compatible chat completions server for benchmarks
 * and tests, on one libevent loop: each reply waits its fixed latency on a
 * timer (no thread or sleep per request), or is held until SIGUSR1. It plays
 * every role of forum's control loop from the system prompt it is sent:
 * the coordinator plans one task on the lane the router suggests, the
 * classifier picks "backend", the validator passes, the synthesizer and
 * the tasks answer a line of text.
 *
 *   fake_model [--port N] [--delay-ms L] [--hold]
 *
 * prints "port N" on stdout once it listens (N is the bound port, for
 * --port 0). GET /stats answers {"calls", "coordinator", "classifier",
 * "validator", "synthesizer", "task", "held", "in_flight"}. SIGUSR1 lets
 * every held reply go and stops holding; SIGUSR2 lets them go and goes on
 * holding (to drop the calls of a client that died); SIGTERM stops it. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"

enum { R_COORD, R_CLASS, R_VALID, R_SYNTH, R_TASK, R_N };

struct server {
    struct event_base *base;
    int delay_ms;
    int hold;
    unsigned long long calls, by_role[R_N], in_flight;
    struct pending *held; /* waiting for SIGUSR1 */
    unsigned long long n_held;
};

struct pending {
    struct server *s;
    struct evhttp_request *req;
    char *body;
    size_t len;
    struct event *timer;
    struct pending *next;
};

static int role_of(const char *system)
{
    if (!system)
        return R_TASK;
    if (strstr(system, "coordinator of forum"))
        return R_COORD;
    if (strstr(system, "classifier of forum"))
        return R_CLASS;
    if (strstr(system, "validator of forum"))
        return R_VALID;
    if (strstr(system, "synthesizer of forum"))
        return R_SYNTH;
    return R_TASK;
}

/* The answer of a role; the coordinator plans on the suggested lane. */
static int answer(int role, const char *system, struct fo_buf *text)
{
    switch (role) {
    case R_COORD: {
        char lane[65] = "backend";
        const char *p = system ? strstr(system, "suggests the agent \"") : NULL;
        if (p) {
            p += strlen("suggests the agent \"");
            size_t n = 0;
            while (p[n] && p[n] != '"' && n < 64)
                n++;
            memcpy(lane, p, n);
            lane[n] = '\0';
        }
        return fo_buf_printf(text,
                             "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"%s\","
                             "\"instruction\":\"do the work\"}]}",
                             lane);
    }
    case R_CLASS:
        return fo_buf_puts(text, "{\"lane\":\"backend\"}");
    case R_VALID:
        return fo_buf_puts(text, "{\"pass\":true,\"reason\":\"ok\"}");
    case R_SYNTH:
        return fo_buf_puts(text, "the work is done");
    default:
        return fo_buf_puts(text, "done");
    }
}

static void reply_json(struct evhttp_request *req, int code, const char *json,
                       size_t len)
{
    struct evbuffer *b = evbuffer_new();
    if (!b) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    evbuffer_add(b, json, len);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "application/json");
    evhttp_send_reply(req, code, code == 200 ? "OK" : "Error", b);
    evbuffer_free(b);
}

static void send_pending(struct pending *p)
{
    p->s->in_flight--;
    reply_json(p->req, 200, p->body, p->len);
    if (p->timer)
        event_free(p->timer);
    free(p->body);
    free(p);
}

static void on_due(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct pending *p = arg;
    struct server *s = p->s;
    if (s->hold) {
        event_free(p->timer);
        p->timer = NULL;
        p->next = s->held;
        s->held = p;
        s->n_held++;
        return;
    }
    send_pending(p);
}

static void on_chat(struct evhttp_request *req, struct server *s)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    const char *data = (const char *)evbuffer_pullup(in, -1);
    cJSON *j = NULL;
    if (!data || fo_json_parse(data, len, &j, NULL) != FO_OK) {
        reply_json(req, 400, "{\"error\":{\"message\":\"bad json\"}}", 32);
        return;
    }
    const char *system = NULL;
    const cJSON *m;
    cJSON_ArrayForEach (m, cJSON_GetObjectItemCaseSensitive(j, "messages")) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (cJSON_IsString(r) && !strcmp(r->valuestring, "system") &&
            cJSON_IsString(c))
            system = c->valuestring;
    }
    int role = role_of(system);
    struct fo_buf text, out;
    fo_buf_init(&text, FO_BUF_UNLIMITED);
    fo_buf_init(&out, FO_BUF_UNLIMITED);
    cJSON *o = cJSON_CreateObject(), *choices = NULL, *c0 = NULL, *msg = NULL;
    int ok = !answer(role, system, &text) && o &&
             cJSON_AddStringToObject(o, "id", "fake") &&
             cJSON_AddStringToObject(o, "object", "chat.completion") &&
             cJSON_AddStringToObject(o, "model", "fake") &&
             (choices = cJSON_AddArrayToObject(o, "choices")) &&
             (c0 = cJSON_CreateObject()) && cJSON_AddItemToArray(choices, c0) &&
             fo_json_add_int(c0, "index", 0) &&
             (msg = cJSON_AddObjectToObject(c0, "message")) &&
             cJSON_AddStringToObject(msg, "role", "assistant") &&
             cJSON_AddStringToObject(msg, "content", text.data) &&
             cJSON_AddStringToObject(c0, "finish_reason", "stop") &&
             !fo_json_canon(o, &out, NULL);
    cJSON_Delete(o);
    cJSON_Delete(j);
    fo_buf_release(&text);
    struct pending *p = ok ? calloc(1, sizeof(*p)) : NULL;
    if (!p) {
        fo_buf_release(&out);
        reply_json(req, 500, "{\"error\":{\"message\":\"no memory\"}}", 33);
        return;
    }
    s->calls++;
    s->by_role[role]++;
    s->in_flight++;
    p->s = s;
    p->req = req;
    p->body = fo_buf_detach(&out, &p->len);
    fo_buf_release(&out);
    p->timer = evtimer_new(s->base, on_due, p);
    struct timeval tv = {s->delay_ms / 1000, (s->delay_ms % 1000) * 1000};
    if (!p->timer || evtimer_add(p->timer, &tv) != 0)
        send_pending(p);
}

static void on_stats(struct evhttp_request *req, struct server *s)
{
    char b[512];
    int n = snprintf(b, sizeof(b),
                     "{\"calls\":%llu,\"coordinator\":%llu,\"classifier\":%llu,"
                     "\"validator\":%llu,\"synthesizer\":%llu,\"task\":%llu,"
                     "\"held\":%llu,\"in_flight\":%llu}\n",
                     s->calls, s->by_role[R_COORD], s->by_role[R_CLASS],
                     s->by_role[R_VALID], s->by_role[R_SYNTH],
                     s->by_role[R_TASK], s->n_held, s->in_flight);
    reply_json(req, 200, b, n > 0 && (size_t)n < sizeof(b) ? (size_t)n : 0);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    struct server *s = arg;
    const char *uri = evhttp_request_get_uri(req);
    if (evhttp_request_get_command(req) == EVHTTP_REQ_GET &&
        !strcmp(uri, "/stats"))
        on_stats(req, s);
    else if (evhttp_request_get_command(req) == EVHTTP_REQ_POST &&
             strstr(uri, "/chat/completions"))
        on_chat(req, s);
    else
        reply_json(req, 404, "{\"error\":{\"message\":\"no route\"}}", 32);
}

/* SIGUSR1: let every held reply go and hold no more; SIGUSR2: let them go
 * (their clients may be gone) and keep holding the next ones. */
static void on_release(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct server *s = arg;
    if (fd == SIGUSR1)
        s->hold = 0;
    while (s->held) {
        struct pending *p = s->held;
        s->held = p->next;
        s->n_held--;
        send_pending(p);
    }
}

static void on_term(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    event_base_loopexit(arg, NULL);
}

int main(int argc, char **argv)
{
    struct server s = {0};
    int port = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = (int)strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--delay-ms") && i + 1 < argc)
            s.delay_ms = (int)strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--hold"))
            s.hold = 1;
        else {
            fprintf(stderr,
                    "usage: fake_model [--port N] [--delay-ms L] [--hold]\n"
                    "  e.g. fake_model --port 0 --delay-ms 200\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    s.base = event_base_new();
    struct evhttp *http = s.base ? evhttp_new(s.base) : NULL;
    if (!http)
        return 3;
    evhttp_set_max_body_size(http, 64 << 20);
    evhttp_set_gencb(http, on_request, &s);
    /* a deep accept queue: thousands of runs connect at once */
    struct sockaddr_in bind_to = {.sin_family = AF_INET,
                                  .sin_port = htons((uint16_t)port),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct evconnlistener *lis = evconnlistener_new_bind(
        s.base, NULL, NULL, LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE, 16384,
        (struct sockaddr *)&bind_to, sizeof(bind_to));
    struct evhttp_bound_socket *b =
        lis ? evhttp_bind_listener(http, lis) : NULL;
    if (!b) {
        fprintf(stderr, "fake_model: cannot bind 127.0.0.1:%d\n", port);
        return 3;
    }
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    getsockname(evhttp_bound_socket_get_fd(b), (struct sockaddr *)&sa, &sl);
    printf("port %d\n", ntohs(sa.sin_port));
    fflush(stdout);
    struct event *usr = evsignal_new(s.base, SIGUSR1, on_release, &s);
    struct event *usr2 = evsignal_new(s.base, SIGUSR2, on_release, &s);
    event_add(usr2, NULL);
    struct event *term = evsignal_new(s.base, SIGTERM, on_term, s.base);
    event_add(usr, NULL);
    event_add(term, NULL);
    event_base_dispatch(s.base);
    event_free(usr);
    event_free(usr2);
    event_free(term);
    evhttp_free(http);
    event_base_free(s.base);
    return 0;
}
