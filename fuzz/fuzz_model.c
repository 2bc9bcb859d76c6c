/* fuzz_model: the model client's reply parsers on arbitrary bytes. A tiny
 * server thread in this process answers every request with the input as
 * a 200 application/json body; the client (orch_model_call_tools_start on
 * a private event_base) asks it as an OpenAI-compatible chat server or as
 * the Anthropic Messages API (the input's first byte chooses), offering a
 * tool or not, so the text, the tool calls and the error paths of both
 * wire formats read what a broken or hostile model server could send.
 * Nothing may crash, leak or hang; a reply that parses is valid UTF-8. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/orch.h"
#include "daemon/orch_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static int lfd = -1, port;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *body;
static size_t body_len;

/* Reads a request (headers and Content-Length bytes), answers with body. */
static void *server(void *arg)
{
    (void)arg;
    static char req[1 << 16];
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            continue;
        size_t have = 0;
        long want = -1;
        char *end = NULL;
        for (;;) {
            ssize_t r = recv(fd, req + have, sizeof(req) - 1 - have, 0);
            if (r <= 0)
                break;
            have += (size_t)r;
            req[have] = 0;
            if (!end && (end = strstr(req, "\r\n\r\n")) != NULL) {
                char *cl = strcasestr(req, "Content-Length:");
                want = cl ? strtol(cl + 15, NULL, 10) : 0;
            }
            if (end && (long)(have - (size_t)(end + 4 - req)) >= want)
                break;
            if (have == sizeof(req) - 1)
                break;
        }
        pthread_mutex_lock(&mu);
        char head[128];
        int hn =
            snprintf(head, sizeof(head),
                     "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     body_len);
        (void)!send(fd, head, (size_t)hn, MSG_NOSIGNAL);
        if (body_len)
            (void)!send(fd, body, body_len, MSG_NOSIGNAL);
        pthread_mutex_unlock(&mu);
        close(fd);
    }
    return NULL;
}

static void setup(void)
{
    /* as the daemon does (daemon/service.c): a client that hung up is
     * an error on the write, never a signal that ends the process */
    signal(SIGPIPE, SIG_IGN);
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(lfd, 16) != 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &al) != 0)
        abort();
    port = ntohs(a.sin_port);
    pthread_t t;
    if (pthread_create(&t, NULL, server, NULL) != 0)
        abort();
    pthread_detach(t);
}

struct outcome {
    int done;
};

static void done(void *arg, int rc, struct orch_model_reply *rep,
                 const struct fo_err *err)
{
    (void)err;
    struct outcome *o = arg;
    o->done = 1;
    if (rc == FO_OK && rep->text) {
        /* what a parsed reply promises: valid UTF-8, its length right */
        if (strlen(rep->text) != rep->text_len)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (lfd < 0)
        setup();
    if (n == 0)
        return 0;
    int anthropic = data[0] & 1, tools = data[0] & 2;
    pthread_mutex_lock(&mu);
    free(body);
    body = malloc(n - 1 ? n - 1 : 1);
    memcpy(body, data + 1, n - 1);
    body_len = n - 1;
    pthread_mutex_unlock(&mu);
    /* one client per wire format, made once (it loads the CA store) */
    static char url[64];
    static struct orch_model_provider p[2];
    static struct orch_model *models[2];
    if (!models[0]) {
        snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", port);
        for (int i = 0; i < 2; i++) {
            p[i] = (struct orch_model_provider){.api = i ? ORCH_EXEC_ANTHROPIC
                                                         : ORCH_EXEC_CHAT,
                                                .url = url,
                                                .model = "fuzz",
                                                .tier = ORCH_TIER_ANY};
            struct orch_model_config cfg = {.providers = &p[i],
                                            .n_providers = 1,
                                            .timeout_ms = 5000,
                                            .attempts = 1};
            if (orch_model_create(&cfg, &models[i], NULL) != FO_OK)
                abort();
        }
    }
    struct orch_model *m = models[anthropic];
    struct event_base *base = event_base_new();
    struct orch_model_msg msgs[] = {{.role = "user", .content = "hi"}};
    struct outcome o = {0};
    const char *tl = tools ? "[{\"name\":\"read_file\",\"description\":\"r\","
                             "\"input_schema\":{\"type\":\"object\"}}]"
                           : NULL;
    if (orch_model_call_tools_start(m, base, NULL, p[anthropic].api,
                                    ORCH_TIER_ANY, tl, msgs, 1, done, &o, NULL,
                                    NULL) == FO_OK)
        while (!o.done)
            event_base_loop(base, EVLOOP_ONCE);
    event_base_free(base);
    return 0;
}
