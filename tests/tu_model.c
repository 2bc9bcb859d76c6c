/* tu_model: the fake chat server of tu_model.h. */
#include "tests/testutil.h"
#include "tests/tu_model.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cJSON.h>
#include <criterion/criterion.h>

static int read_req(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    long want = -1;
    while (len < cap - 1) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 3000) <= 0)
            break;
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        char *h = strstr(buf, "\r\n\r\n");
        if (h && want < 0) {
            char *cl = strcasestr(buf, "content-length:");
            want = (long)(h + 4 - buf) + (cl ? strtol(cl + 15, NULL, 10) : 0);
        }
        if (want >= 0 && (long)len >= want)
            break;
    }
    buf[len] = '\0';
    return (int)len;
}

/* A tool name OpenAI and Anthropic accept: ^[a-zA-Z0-9_-]{1,64}$. */
static int name_ok(const cJSON *n)
{
    if (!cJSON_IsString(n))
        return 0;
    size_t len = strlen(n->valuestring);
    return len >= 1 && len <= 64 &&
           strspn(n->valuestring, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
                                  "OPQRSTUVWXYZ0123456789_-") == len;
}

/* As the providers do: 1 when a tool offered, or a tool call in the
 * history, has a name they refuse. */
static int bad_tool_names(const cJSON *j)
{
    const cJSON *t, *m, *c;
    cJSON_ArrayForEach (t, cJSON_GetObjectItemCaseSensitive(j, "tools")) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!name_ok(cJSON_GetObjectItemCaseSensitive(fn ? fn : t, "name")))
            return 1;
    }
    cJSON_ArrayForEach (m, cJSON_GetObjectItemCaseSensitive(j, "messages")) {
        cJSON_ArrayForEach (c,
                            cJSON_GetObjectItemCaseSensitive(m, "tool_calls"))
            if (!name_ok(cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetObjectItemCaseSensitive(c, "function"), "name")))
                return 1;
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsArray(content))
            continue;
        cJSON_ArrayForEach (c, content) {
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(c, "type");
            if (cJSON_IsString(ty) && !strcmp(ty->valuestring, "tool_use") &&
                !name_ok(cJSON_GetObjectItemCaseSensitive(c, "name")))
                return 1;
        }
    }
    return 0;
}

/* The name the model calls for the script's tool: the one it was offered
 * (a roster's "server.tool" is offered under another name), else as the
 * script wrote it. */
static void offered_name(const cJSON *j, char *name, size_t size)
{
    const cJSON *t;
    cJSON_ArrayForEach (t, cJSON_GetObjectItemCaseSensitive(j, "tools")) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(fn ? fn : t, "name");
        if (!cJSON_IsString(n) || !strcmp(n->valuestring, name))
            continue;
        /* server.tool offered as server__tool */
        char alt[160];
        snprintf(alt, sizeof(alt), "%s", name);
        char *dot = strchr(alt, '.');
        if (!dot)
            continue;
        char want[170];
        snprintf(want, sizeof(want), "%.*s__%s", (int)(dot - alt), alt,
                 dot + 1);
        if (!strcmp(n->valuestring, want) && strlen(want) < size) {
            memcpy(name, want, strlen(want) + 1);
            return;
        }
    }
}

static void answer(struct fake *f, int fd, const char *req)
{
    const char *body = strstr(req, "\r\n\r\n");
    cJSON *j = body ? cJSON_Parse(body + 4) : NULL;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    const cJSON *first = cJSON_GetArrayItem(msgs, 0);
    const cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    /* Anthropic's Messages API carries the system prompt at the top */
    const cJSON *top_sys = cJSON_GetObjectItemCaseSensitive(j, "system");
    int anthropic = !strncmp(req, "POST /v1/messages ", 18);
    const char *sys =
        cJSON_IsString(top_sys) ? top_sys->valuestring
        : cJSON_GetObjectItemCaseSensitive(first, "role") &&
                !strcmp(cJSON_GetObjectItemCaseSensitive(first, "role")
                            ->valuestring,
                        "system")
            ? cJSON_GetObjectItemCaseSensitive(first, "content")->valuestring
            : "";
    int r = R_TASK;
    for (int i = 0; i < R_TASK; i++) {
        char want[64];
        snprintf(want, sizeof(want), "You are the %s", roles[i]);
        if (!strncmp(sys, want, strlen(want)))
            r = i;
    }
    const char *m = cJSON_IsString(model) ? model->valuestring : "?";
    /* the last message's text; a tool result (OpenAI "tool" message, or
     * Anthropic's tool_result block) is what the script sees then */
    const cJSON *lc = cJSON_GetObjectItemCaseSensitive(last, "content");
    if (cJSON_IsArray(lc)) {
        const cJSON *b0 = cJSON_GetArrayItem(lc, 0);
        lc = cJSON_GetObjectItemCaseSensitive(b0, "content")
                 ? cJSON_GetObjectItemCaseSensitive(b0, "content")
                 : cJSON_GetObjectItemCaseSensitive(b0, "text");
    }
    const char *prompt = cJSON_IsString(lc) ? lc->valuestring : "";
    size_t ll = strlen(f->log);
    snprintf(f->log + ll, sizeof(f->log) - ll, "%s:%s ", roles[r], m);
    if (f->n_prompts < 64)
        f->prompts[f->n_prompts++] = strdup(prompt);
    size_t bl = strlen(body ? body : "");
    f->seen = realloc(f->seen, f->seen_len + bl + 1);
    memcpy(f->seen + f->seen_len, body ? body : "", bl + 1);
    f->seen_len += bl;
    if (bad_tool_names(j)) {
        static const char e[] =
            "{\"error\":{\"message\":\"Invalid tool name: must match "
            "^[a-zA-Z0-9_-]{1,64}$\",\"type\":\"invalid_request_error\"}}";
        char head[256];
        int hl = snprintf(head, sizeof(head),
                          "HTTP/1.1 400 Bad Request\r\nContent-Type: "
                          "application/json\r\nContent-Length: %zu\r\n"
                          "Connection: close\r\n\r\n",
                          sizeof(e) - 1);
        f->bad_names++;
        (void)!write(fd, head, (size_t)hl);
        (void)!write(fd, e, sizeof(e) - 1);
        cJSON_Delete(j);
        return;
    }
    const char *text = f->fn(f, roles[r], f->count[r]++, m, prompt);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", m);
    /* "CALL tool ARGS": a tool call with the arguments text ARGS as the
     * model wrote it (valid JSON or not) */
    if (!strncmp(text, "CALL ", 5)) {
        char name[128] = "";
        const char *sp = strchr(text + 5, ' ');
        size_t nl = sp ? (size_t)(sp - text - 5) : strlen(text + 5);
        snprintf(name, sizeof(name), "%.*s", (int)nl, text + 5);
        offered_name(j, name, sizeof(name));
        const char *args = sp ? sp + 1 : "{}";
        char id[32];
        snprintf(id, sizeof(id), "call_%d", f->count[r]);
        if (anthropic) {
            f->anthropic++;
            cJSON_AddStringToObject(o, "type", "message");
            cJSON_AddStringToObject(o, "role", "assistant");
            cJSON *content = cJSON_AddArrayToObject(o, "content");
            cJSON *c0 = cJSON_CreateObject();
            cJSON_AddStringToObject(c0, "type", "tool_use");
            cJSON_AddStringToObject(c0, "id", id);
            cJSON_AddStringToObject(c0, "name", name);
            cJSON *in = cJSON_Parse(args);
            cJSON_AddItemToObject(c0, "input", in ? in : cJSON_CreateObject());
            cJSON_AddItemToArray(content, c0);
            cJSON_AddStringToObject(o, "stop_reason", "tool_use");
        } else {
            cJSON *ch = cJSON_AddArrayToObject(o, "choices");
            cJSON *c0 = cJSON_CreateObject();
            cJSON *msg = cJSON_AddObjectToObject(c0, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON_AddNullToObject(msg, "content");
            cJSON *tc = cJSON_AddArrayToObject(msg, "tool_calls");
            cJSON *one = cJSON_CreateObject();
            cJSON_AddStringToObject(one, "id", id);
            cJSON_AddStringToObject(one, "type", "function");
            cJSON *fn = cJSON_AddObjectToObject(one, "function");
            cJSON_AddStringToObject(fn, "name", name);
            cJSON_AddStringToObject(fn, "arguments", args);
            cJSON_AddItemToArray(tc, one);
            cJSON_AddStringToObject(c0, "finish_reason", "tool_calls");
            cJSON_AddItemToArray(ch, c0);
        }
    } else if (anthropic) {
        f->anthropic++;
        cJSON_AddStringToObject(o, "type", "message");
        cJSON_AddStringToObject(o, "role", "assistant");
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        cJSON *c0 = cJSON_CreateObject();
        cJSON_AddStringToObject(c0, "type", "text");
        cJSON_AddStringToObject(c0, "text", text);
        cJSON_AddItemToArray(content, c0);
        cJSON_AddStringToObject(o, "stop_reason", "end_turn");
    } else {
        cJSON *ch = cJSON_AddArrayToObject(o, "choices");
        cJSON *c0 = cJSON_CreateObject();
        cJSON *msg = cJSON_AddObjectToObject(c0, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        cJSON_AddStringToObject(msg, "content", text);
        cJSON_AddItemToArray(ch, c0);
    }
    /* usage as each API reports it: 7 in, 3 out, every answer */
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, anthropic ? "input_tokens" : "prompt_tokens", 7);
    cJSON_AddNumberToObject(
        u, anthropic ? "output_tokens" : "completion_tokens", 3);
    char *out = cJSON_PrintUnformatted(o);
    char head[256];
    int hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      strlen(out));
    (void)!write(fd, head, (size_t)hl);
    (void)!write(fd, out, strlen(out));
    free(out);
    cJSON_Delete(o);
    cJSON_Delete(j);
}

static void *serve(void *arg)
{
    struct fake *f = arg;
    static __thread char buf[1 << 20];
    while (!atomic_load(&f->stop)) {
        struct pollfd pf = {.fd = f->lfd, .events = POLLIN};
        if (poll(&pf, 1, 20) <= 0)
            continue;
        int c = accept(f->lfd, NULL, NULL);
        if (c < 0)
            continue;
        if (read_req(c, buf, sizeof(buf)) > 0)
            answer(f, c, buf);
        shutdown(c, SHUT_WR);
        close(c);
    }
    return NULL;
}

struct fake *fake_start(fake_fn fn)
{
    struct fake *f = calloc(1, sizeof(*f));
    cr_assert_not_null(f);
    f->fn = fn;
    f->lfd = tu_listen_loopback(&f->port);
    cr_assert_eq(pthread_create(&f->th, NULL, serve, f), 0);
    return f;
}

void fake_stop(struct fake *f)
{
    atomic_store(&f->stop, 1);
    pthread_join(f->th, NULL);
    close(f->lfd);
}

void fake_free(struct fake *f)
{
    for (int i = 0; i < f->n_prompts; i++)
        free(f->prompts[i]);
    free(f->seen);
    free(f);
}

/* ---- the held script ---------------------------------------------------- */

atomic_int tu_held_hold = 1;
atomic_int tu_held_coord_calls, tu_held_coord_done;

const char *tu_held_script(struct fake *f, const char *role, int n,
                           const char *model, const char *prompt)
{
    (void)f, (void)n, (void)model, (void)prompt;
    if (!strcmp(role, "coordinator")) {
        atomic_fetch_add(&tu_held_coord_calls, 1);
        int64_t t0 = tu_now_ms();
        while (atomic_load(&tu_held_hold) && tu_now_ms() - t0 < 30000)
            usleep(2000);
        atomic_fetch_add(&tu_held_coord_done, 1);
        return "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"backend\","
               "\"instruction\":\"make the schema\"}]}";
    }
    if (!strcmp(role, "classifier"))
        return "{\"lane\": \"backend\"}";
    if (!strcmp(role, "validator"))
        return "{\"pass\": true, \"reason\": \"ok\"}";
    if (!strcmp(role, "synthesizer"))
        return TU_HELD_ANSWER;
    return "schema made";
}

void tu_held_wait_coord(int n)
{
    int64_t t0 = tu_now_ms();
    while (atomic_load(&tu_held_coord_calls) < n) {
        cr_assert_lt(tu_now_ms() - t0, 10000, "no coordinator call %d", n);
        usleep(2000);
    }
}
