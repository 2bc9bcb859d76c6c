/* The forge layer on the gateway's way through (surfaces/gateway_forge.c
 * and its use in surfaces/gateway.c) against the real daemon and the fake
 * model of tu_model.h, which writes its tool call as text: on per provider
 * ("gateway_forge": true) and per client key (`forum key add --forge`),
 * the client gets real tool_calls (OpenAI) or tool_use blocks (Anthropic,
 * translated or native); off, the text as the provider sent it; a tool the
 * client did not offer is not rescued; the witnessed entry says what was
 * rescued, with the provider's own answer's hash. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_sha.h"
#include "surfaces/gateway_forge.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"
#include "tests/tu_model.h"

#define CALL_TEXT                                                              \
    "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":"            \
    "\"Oslo\"}}</tool_call>"

static const char *answer_call(struct fake *f, const char *role, int n,
                               const char *model, const char *prompt)
{
    (void)f, (void)role, (void)n, (void)model, (void)prompt;
    return CALL_TEXT;
}

/* m-plain: no forge; m-forge: gateway_forge; c-forge: an Anthropic
 * provider with gateway_forge. */
static void start(struct tu_daemon *d, const char *dir, const struct fake *f)
{
    char p[1024], cfg[1024];
    snprintf(p, sizeof(p), "%s/forum.json", dir);
    int n = snprintf(cfg, sizeof(cfg),
                     "{\"models\":{\"providers\":["
                     "{\"name\":\"plain\",\"api\":\"chat\",\"url\":"
                     "\"http://127.0.0.1:%d/v1\",\"model\":\"m-plain\"},"
                     "{\"name\":\"forged\",\"api\":\"chat\",\"url\":"
                     "\"http://127.0.0.1:%d/v1\",\"model\":\"m-forge\","
                     "\"gateway_forge\":true},"
                     "{\"name\":\"claude\",\"api\":\"anthropic\",\"url\":"
                     "\"http://127.0.0.1:%d\",\"model\":\"c-forge\","
                     "\"gateway_forge\":true}]}}",
                     f->port, f->port, f->port);
    cr_assert_eq(tu_write_file(p, cfg, (size_t)n), 0);
    tu_daemon_start(d, dir, NULL);
}

static void stop(struct tu_daemon *d, struct fake *f, char *dir)
{
    cr_assert_eq(tu_daemon_signal_wait(d, SIGTERM, 30000), 0);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

/* `forum key add NAME [a1]`: the key it printed (static). */
static const char *key_add(const char *dir, const char *name, const char *a1)
{
    static char key[4][128];
    static int at;
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "key", "add", name, a1, NULL);
    cr_assert_eq(r.status, 0, "key add %s: %d %s", name, r.status, r.err);
    char *k = key[at++ % 4];
    snprintf(k, 128, "%.*s", (int)strcspn(r.out, "\n"), r.out);
    cr_assert(!strncmp(k, "fk_", 3), "key add: %s", r.out);
    tu_run_free(&r);
    return k;
}

/* POSTs a request for model offering the tool named tool (chat shape on
 * /v1/chat/completions, Anthropic's on /v1/messages) with cred as a
 * bearer; the status, and the body parsed into *out. */
static int ask(const struct tu_daemon *d, const char *path, const char *cred,
               const char *model, const char *tool, cJSON **out)
{
    int anth = strstr(path, "messages") != NULL;
    char body[1024], req[2048];
    if (anth)
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"max_tokens\":64,\"messages\":[{"
                 "\"role\":\"user\",\"content\":\"weather in Oslo?\"}],"
                 "\"tools\":[{\"name\":\"%s\",\"input_schema\":{\"type\":"
                 "\"object\",\"properties\":{\"city\":{\"type\":"
                 "\"string\"}}}}]}",
                 model, tool);
    else
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\","
                 "\"content\":\"weather in Oslo?\"}],\"tools\":[{\"type\":"
                 "\"function\",\"function\":{\"name\":\"%s\",\"parameters\":"
                 "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
                 "\"string\"}}}}}]}",
                 model, tool);
    int n = snprintf(req, sizeof(req),
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "
                     "close\r\nContent-Type: application/json\r\n"
                     "Authorization: Bearer %s\r\nContent-Length: %zu\r\n\r\n"
                     "%s",
                     path, cred, strlen(body), body);
    int closed = 0;
    char *r = NULL;
    int st = tu_http_raw(d->port, req, (size_t)n, 60000, &closed, &r);
    cr_assert(r, "no reply from %s", path);
    const char *b = strstr(r, "\r\n\r\n");
    cr_assert(b, "no body: %s", r);
    *out = tu_json_parse(b + 4);
    free(r);
    return st;
}

/* The last gateway_call entry's body. */
static cJSON *last_call(const struct tu_daemon *d)
{
    cJSON *r = tu_http_json(d, "GET", "/ledger?limit=1000", NULL, 200);
    long long seq = -1;
    const cJSON *e;
    cJSON_ArrayForEach (e, cJSON_GetObjectItemCaseSensitive(r, "entries"))
        if (!strcmp(tu_str(e, "kind"), "gateway_call"))
            seq = tu_num(e, "seq");
    cJSON_Delete(r);
    cr_assert(seq >= 0, "no gateway_call entry");
    char path[64];
    snprintf(path, sizeof(path), "/ledger/%lld/payload", seq);
    cJSON *g = tu_http_json(d, "GET", path, NULL, 200);
    cJSON *b = cJSON_DetachItemFromObjectCaseSensitive(g, "body");
    cJSON_Delete(g);
    cr_assert(cJSON_IsObject(b));
    return b;
}

static void sha_hex(const char *s, char out[65])
{
    uint8_t d[FO_SHA256_LEN];
    fo_sha256(s, strlen(s), d);
    fo_hex(d, sizeof(d), out);
}

/* The chat answer the fake model sends for model (tu_model.c's shape),
 * as its bytes. */
static char *fake_chat_bytes(const char *model)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", model);
    cJSON *ch = cJSON_AddArrayToObject(o, "choices");
    cJSON *c0 = cJSON_CreateObject();
    cJSON *msg = cJSON_AddObjectToObject(c0, "message");
    cJSON_AddStringToObject(msg, "role", "assistant");
    cJSON_AddStringToObject(msg, "content", CALL_TEXT);
    cJSON_AddItemToArray(ch, c0);
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", 7);
    cJSON_AddNumberToObject(u, "completion_tokens", 3);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* The answer carries get_weather({"city":"Oslo"}) as a real tool call,
 * the text gone. */
static void expect_tool_calls(const cJSON *j)
{
    const cJSON *c0 =
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(c0, "message");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    cr_assert_eq(cJSON_GetArraySize(tc), 1, "no tool_calls: %s",
                 cJSON_PrintUnformatted(j));
    const cJSON *t0 = cJSON_GetArrayItem(tc, 0);
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t0, "function");
    cr_expect_str_eq(tu_str(t0, "type"), "function");
    cr_expect(!strncmp(tu_str(t0, "id"), "call_", 5));
    cr_expect_str_eq(tu_str(fn, "name"), "get_weather");
    cJSON *args = tu_json_parse(tu_str(fn, "arguments"));
    cr_expect_str_eq(tu_str(args, "city"), "Oslo");
    cJSON_Delete(args);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(m, "content")));
    cr_expect_str_eq(tu_str(c0, "finish_reason"), "tool_calls");
}

/* The answer is the text as the fake model wrote it, no tool call. */
static void expect_text(const cJSON *j)
{
    const cJSON *c0 =
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(c0, "message");
    cr_expect_str_eq(tu_str(m, "content"), CALL_TEXT);
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(m, "tool_calls"));
}

/* An Anthropic message whose only block is the tool_use. */
static void expect_tool_use(const cJSON *j)
{
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(j, "content");
    cr_assert_eq(cJSON_GetArraySize(ct), 1, "%s", cJSON_PrintUnformatted(j));
    const cJSON *b = cJSON_GetArrayItem(ct, 0);
    cr_expect_str_eq(tu_str(b, "type"), "tool_use");
    cr_expect_str_eq(tu_str(b, "name"), "get_weather");
    cr_expect(strlen(tu_str(b, "id")) > 0);
    cr_expect_str_eq(
        tu_str(cJSON_GetObjectItemCaseSensitive(b, "input"), "city"), "Oslo");
    cr_expect_str_eq(tu_str(j, "stop_reason"), "tool_use");
}

Test(gateway_forge, per_provider_the_text_becomes_tool_calls, .timeout = 120)
{
    struct fake *f = fake_start(answer_call);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, f);
    cJSON *j = NULL;
    cr_assert_eq(
        ask(&d, "/v1/chat/completions", d.token, "m-forge", "get_weather", &j),
        200);
    expect_tool_calls(j);
    cJSON_Delete(j);
    /* the entry: forge on, the form rescued, what the client got and
     * what the provider sent, each by its hash */
    cJSON *e = last_call(&d);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "forge")));
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(e, "rescued");
    cr_assert_eq(cJSON_GetArraySize(rs), 1);
    cr_expect_str_eq(cJSON_GetArrayItem(rs, 0)->valuestring, "tool_call_tag");
    char *sent = fake_chat_bytes("m-forge"), want[65];
    sha_hex(sent, want);
    free(sent);
    cr_expect_str_eq(tu_str(e, "upstream_response_sha256"), want);
    cr_expect_str_neq(tu_str(e, "response_sha256"), want);
    const cJSON *resp = cJSON_GetObjectItemCaseSensitive(e, "response");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(resp, "choices"),
                           0),
        "message");
    cr_expect_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "tool_calls")),
        1, "the witnessed response is what the client got");
    cJSON_Delete(e);
    stop(&d, f, dir);
}

Test(gateway_forge, off_the_text_comes_as_sent, .timeout = 120)
{
    struct fake *f = fake_start(answer_call);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, f);
    cJSON *j = NULL;
    /* the same answer from the provider with forge on, then off */
    cr_assert_eq(
        ask(&d, "/v1/chat/completions", d.token, "m-forge", "get_weather", &j),
        200);
    expect_tool_calls(j);
    cJSON_Delete(j);
    cr_assert_eq(
        ask(&d, "/v1/chat/completions", d.token, "m-plain", "get_weather", &j),
        200);
    expect_text(j);
    cJSON_Delete(j);
    cJSON *e = last_call(&d);
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(e, "forge"));
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(e, "rescued"));
    cr_expect_null(
        cJSON_GetObjectItemCaseSensitive(e, "upstream_response_sha256"));
    cJSON_Delete(e);
    stop(&d, f, dir);
}

Test(gateway_forge, a_tool_not_offered_is_not_rescued, .timeout = 120)
{
    struct fake *f = fake_start(answer_call);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, f);
    cJSON *j = NULL;
    /* offered: rescued; then only get_time offered: the text as sent */
    cr_assert_eq(
        ask(&d, "/v1/chat/completions", d.token, "m-forge", "get_weather", &j),
        200);
    expect_tool_calls(j);
    cJSON_Delete(j);
    cr_assert_eq(
        ask(&d, "/v1/chat/completions", d.token, "m-forge", "get_time", &j),
        200);
    expect_text(j);
    cJSON_Delete(j);
    cJSON *e = last_call(&d);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "forge")));
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(e, "rescued"));
    cJSON_Delete(e);
    stop(&d, f, dir);
}

Test(gateway_forge, per_key, .timeout = 120)
{
    struct fake *f = fake_start(answer_call);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, f);
    const char *on = key_add(dir, "forged", "--forge");
    const char *off = key_add(dir, "plain", NULL);
    char kp[1024];
    snprintf(kp, sizeof(kp), "%s/keys.json", dir);
    char *kf = tu_read_file(kp, NULL);
    cr_assert(kf);
    /* the file says it of the one key made with --forge only */
    int n_forge = 0;
    for (const char *p = kf; (p = strstr(p, "\"forge\": true")); p++)
        n_forge++;
    cr_expect_eq(n_forge, 1, "%s", kf);
    cr_expect_null(strstr(kf, "\"forge\": false"));
    free(kf);
    cJSON *j = NULL;
    /* the provider has no forge: the key's decides */
    cr_assert_eq(
        ask(&d, "/v1/chat/completions", on, "m-plain", "get_weather", &j), 200);
    expect_tool_calls(j);
    cJSON_Delete(j);
    cJSON *e = last_call(&d);
    cr_expect_str_eq(tu_str(e, "key"), "forged");
    cr_expect_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(e, "rescued")), 1);
    cJSON_Delete(e);
    cr_assert_eq(
        ask(&d, "/v1/chat/completions", off, "m-plain", "get_weather", &j),
        200);
    expect_text(j);
    cJSON_Delete(j);
    /* key list shows it */
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "--json", "key", "list", NULL);
    cr_assert_eq(r.status, 0);
    cJSON *l = tu_run_json(&r);
    const cJSON *k;
    int seen = 0;
    cJSON_ArrayForEach (k, cJSON_GetObjectItemCaseSensitive(l, "keys")) {
        int want = !strcmp(tu_str(k, "name"), "forged");
        cr_expect_eq(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(k, "forge")),
                     want, "%s", tu_str(k, "name"));
        seen++;
    }
    cr_expect_eq(seen, 2);
    cJSON_Delete(l);
    tu_run_free(&r);
    stop(&d, f, dir);
}

Test(gateway_forge, anthropic_route_gets_tool_use_blocks, .timeout = 120)
{
    struct fake *f = fake_start(answer_call);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, f);
    cJSON *j = NULL;
    /* translated for the chat provider m-forge */
    cr_assert_eq(ask(&d, "/v1/messages", d.token, "m-forge", "get_weather", &j),
                 200);
    expect_tool_use(j);
    cJSON_Delete(j);
    cJSON *e = last_call(&d);
    cr_expect_str_eq(tu_str(e, "translated"), "chat");
    cr_expect_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(e, "rescued")), 1);
    char *sent = fake_chat_bytes("m-forge"), want[65];
    sha_hex(sent, want);
    free(sent);
    cr_expect_str_eq(tu_str(e, "upstream_response_sha256"), want);
    cJSON_Delete(e);
    /* an Anthropic provider's own answer */
    cr_assert_eq(ask(&d, "/v1/messages", d.token, "c-forge", "get_weather", &j),
                 200);
    expect_tool_use(j);
    cr_expect(
        !strncmp(tu_str(cJSON_GetArrayItem(
                            cJSON_GetObjectItemCaseSensitive(j, "content"), 0),
                        "id"),
                 "toolu_", 6));
    cJSON_Delete(j);
    e = last_call(&d);
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(e, "translated"));
    cr_expect_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(e, "rescued")), 1);
    cJSON_Delete(e);
    stop(&d, f, dir);
}

/* ---- the pure functions ------------------------------------------------ */

Test(gateway_forge, tools_offered_in_either_shape)
{
    cJSON *chat = tu_json_parse(
        "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"b\"}}]}");
    cJSON *anth = tu_json_parse("{\"tools\":[{\"name\":\"c\"}]}");
    cJSON *none = tu_json_parse("{\"tools\":\"no\"}");
    cJSON *t = surf_gwf_tools(chat);
    cr_assert_eq(cJSON_GetArraySize(t), 2);
    cr_expect_str_eq(cJSON_GetArrayItem(t, 1)->valuestring, "b");
    cJSON_Delete(t);
    t = surf_gwf_tools(anth);
    cr_assert_eq(cJSON_GetArraySize(t), 1);
    cr_expect_str_eq(cJSON_GetArrayItem(t, 0)->valuestring, "c");
    cJSON_Delete(t);
    cr_expect_null(surf_gwf_tools(none));
    cJSON_Delete(chat);
    cJSON_Delete(anth);
    cJSON_Delete(none);
}

Test(gateway_forge, chat_two_forms_text_kept_other_members_kept)
{
    cJSON *tools = tu_json_parse("[\"get_weather\",\"get_time\"]");
    const char *body =
        "{\"id\":\"x1\",\"created\":1732000000,\"choices\":[{\"index\":0,"
        "\"message\":{\"role\":\"assistant\",\"content\":\"Sure. "
        "<tool_call>{\\\"name\\\":\\\"get_weather\\\",\\\"arguments\\\":{"
        "\\\"city\\\":\\\"Oslo\\\"}}</tool_call> "
        "<function=get_time>{\\\"tz\\\":"
        "\\\"UTC\\\"}</function>\",\"tool_calls\":[]},\"finish_reason\":"
        "\"stop\"}]}";
    char *out = NULL;
    size_t len = 0;
    cJSON *forms = NULL;
    cr_assert_eq(surf_gwf_chat(body, strlen(body), tools, &out, &len, &forms),
                 1);
    cr_assert_eq(strlen(out), len);
    cJSON *j = tu_json_parse(out);
    cr_expect_str_eq(tu_str(j, "id"), "x1");
    cr_expect_eq(tu_num(j, "created"), 1732000000);
    const cJSON *c0 =
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(c0, "message");
    cr_expect_str_eq(tu_str(m, "content"), "Sure.");
    cr_expect_str_eq(tu_str(c0, "finish_reason"), "tool_calls");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    cr_assert_eq(cJSON_GetArraySize(tc), 2);
    const char *id0 = tu_str(cJSON_GetArrayItem(tc, 0), "id");
    const char *id1 = tu_str(cJSON_GetArrayItem(tc, 1), "id");
    cr_expect_neq(strcmp(id0, id1), 0);
    cr_expect_eq(strncmp(id0, id1, strlen(id0) - 1), 0, "one prefix");
    cr_expect_str_eq(tu_str(cJSON_GetObjectItemCaseSensitive(
                                cJSON_GetArrayItem(tc, 1), "function"),
                            "name"),
                     "get_time");
    cr_assert_eq(cJSON_GetArraySize(forms), 2);
    cr_expect_str_eq(cJSON_GetArrayItem(forms, 0)->valuestring,
                     "tool_call_tag");
    cr_expect_str_eq(cJSON_GetArrayItem(forms, 1)->valuestring, "function_tag");
    cJSON_Delete(j);
    cJSON_Delete(forms);
    free(out);
    cJSON_Delete(tools);
}

Test(gateway_forge, chat_left_alone)
{
    cJSON *tools = tu_json_parse("[\"get_weather\"]");
    const char *cases[] = {
        /* it called a tool already */
        "{\"choices\":[{\"message\":{\"content\":\"<tool_call>{\\\"name\\\":"
        "\\\"get_weather\\\",\\\"arguments\\\":{}}</tool_call>\","
        "\"tool_calls\":[{\"id\":\"a\"}]}}]}",
        /* no call in the text; a malformed tag */
        "{\"choices\":[{\"message\":{\"content\":\"just text\"}}]}",
        "{\"choices\":[{\"message\":{\"content\":\"<tool_call>{oops"
        "</tool_call>\"}}]}",
        /* not a chat completion, not JSON */
        "{\"error\":{}}",
        "not json",
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        char *out = NULL;
        size_t len = 0;
        cJSON *forms = NULL;
        cr_expect_eq(surf_gwf_chat(cases[i], strlen(cases[i]), tools, &out,
                                   &len, &forms),
                     0, "case %zu", i);
        cr_expect_null(out);
        cr_expect_null(forms);
    }
    cJSON_Delete(tools);
}

Test(gateway_forge, messages_text_and_tool_use_blocks)
{
    cJSON *tools = tu_json_parse("[\"get_weather\"]");
    const char *body =
        "{\"id\":\"msg_1\",\"type\":\"message\",\"content\":[{\"type\":"
        "\"text\",\"text\":\"Let me look.\\n```json\\n{\\\"name\\\":"
        "\\\"get_weather\\\",\\\"arguments\\\":{\\\"city\\\":\\\"Oslo\\\"}}"
        "\\n```\"}],\"stop_reason\":\"end_turn\",\"usage\":{"
        "\"input_tokens\":1,\"output_tokens\":2}}";
    char *out = NULL;
    size_t len = 0;
    cJSON *forms = NULL;
    cr_assert_eq(
        surf_gwf_messages(body, strlen(body), tools, &out, &len, &forms), 1);
    cJSON *j = tu_json_parse(out);
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(j, "content");
    cr_assert_eq(cJSON_GetArraySize(ct), 2, "%s", out);
    cr_expect_str_eq(tu_str(cJSON_GetArrayItem(ct, 0), "text"), "Let me look.");
    const cJSON *u = cJSON_GetArrayItem(ct, 1);
    cr_expect_str_eq(tu_str(u, "type"), "tool_use");
    cr_expect(!strncmp(tu_str(u, "id"), "toolu_", 6));
    cr_expect_str_eq(
        tu_str(cJSON_GetObjectItemCaseSensitive(u, "input"), "city"), "Oslo");
    cr_expect_str_eq(tu_str(j, "stop_reason"), "tool_use");
    cr_expect_str_eq(cJSON_GetArrayItem(forms, 0)->valuestring, "fenced_block");
    cJSON_Delete(j);
    cJSON_Delete(forms);
    free(out);
    /* a message that calls a tool already is left as it is */
    const char *used =
        "{\"content\":[{\"type\":\"text\",\"text\":\"<tool_call>{\\\"name\\\":"
        "\\\"get_weather\\\",\\\"arguments\\\":{}}</tool_call>\"},{\"type\":"
        "\"tool_use\",\"id\":\"t\",\"name\":\"get_weather\",\"input\":{}}]}";
    cr_expect_eq(
        surf_gwf_messages(used, strlen(used), tools, &out, &len, &forms), 0);
    cr_expect_null(out);
    cJSON_Delete(tools);
}

Test(gateway_forge, a_bad_setting_is_refused_at_start)
{
    char *dir = tu_tmpdir();
    char p[1024];
    snprintf(p, sizeof(p), "%s/forum.json", dir);
    const char *cfg = "{\"models\":{\"providers\":[{\"api\":\"chat\",\"url\":"
                      "\"http://127.0.0.1:9/v1\",\"model\":\"m\","
                      "\"gateway_forge\":\"yes\"}]}}";
    cr_assert_eq(tu_write_file(p, cfg, strlen(cfg)), 0);
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "serve", "--check", NULL);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "gateway_forge: must be a boolean"), "%s", r.err);
    tu_run_free(&r);
    /* and a key file whose forge is not a boolean */
    snprintf(p, sizeof(p), "%s/keys.json", dir);
    const char *keys =
        "{\"keys\":[{\"name\":\"k\",\"sha256\":\"00000000000000000000000000"
        "00000000000000000000000000000000000000\",\"created_us\":1,"
        "\"forge\":1}]}";
    cr_assert_eq(tu_write_file(p, keys, strlen(keys)), 0);
    chmod(p, 0600);
    r = tu_forumv(NULL, "--ledger", dir, "key", "list", NULL);
    cr_expect_neq(r.status, 0);
    cr_expect(strstr(r.err, "\"forge\": a boolean"), "%s", r.err);
    tu_run_free(&r);
    tu_rmrf(dir);
}
