/* The Anthropic <-> chat completions translation of the gateway
 * (surfaces/gateway_anthropic.c) on its own: requests, answers, stop
 * reasons, errors and the streamed event sequence. */
#include <criterion/criterion.h>

#include <string.h>

#include <cJSON.h>

#include "ledger/fo_json.h"
#include "surfaces/gateway_anthropic.h"

static cJSON *parse(const char *s)
{
    cJSON *j = NULL;
    struct fo_err err;
    cr_assert_eq(fo_json_parse(s, strlen(s), &j, &err), FO_OK, "%s: %s", s,
                 err.msg);
    return j;
}

static char *canon(const cJSON *j)
{
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(fo_json_canon(j, &b, &err), FO_OK);
    return fo_buf_detach(&b, NULL);
}

/* Translates an Anthropic request and compares the canonical chat one. */
static void request_is(const char *anth, const char *want)
{
    cJSON *in = parse(anth), *out = NULL, *w = parse(want);
    struct fo_err err;
    cr_assert_eq(surf_gwa_request(in, "local-model", &out, &err), FO_OK, "%s",
                 err.msg);
    char *got = canon(out), *exp = canon(w);
    cr_assert_str_eq(got, exp);
    free(got);
    free(exp);
    cJSON_Delete(in);
    cJSON_Delete(out);
    cJSON_Delete(w);
}

Test(gwa_request, system_messages_sampling_and_stream)
{
    request_is(
        "{\"model\":\"claude-x\",\"max_tokens\":100,\"temperature\":0.5,"
        "\"top_p\":0.9,\"top_k\":5,\"stop_sequences\":[\"END\"],\"stream\":"
        "true,\"system\":[{\"type\":\"text\",\"text\":\"be brief\"},{\"type\":"
        "\"text\",\"text\":\"be kind\"}],\"messages\":[{\"role\":\"user\","
        "\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":[{\"type\":"
        "\"text\",\"text\":\"hello\"}]},{\"role\":\"user\",\"content\":[{"
        "\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}"
        "]}]}",
        "{\"model\":\"local-model\",\"max_tokens\":100,\"temperature\":0.5,"
        "\"top_p\":0.9,\"stop\":[\"END\"],\"stream\":true,\"stream_options\":"
        "{\"include_usage\":true},\"messages\":[{\"role\":\"system\","
        "\"content\":\"be brief\\nbe kind\"},{\"role\":\"user\",\"content\":"
        "\"hi\"},{\"role\":\"assistant\",\"content\":\"hello\"},{\"role\":"
        "\"user\",\"content\":\"a\\nb\"}]}");
}

Test(gwa_request, tools_tool_use_and_tool_result)
{
    request_is(
        "{\"model\":\"m\",\"max_tokens\":10,\"tools\":[{\"name\":\"get_w\","
        "\"description\":\"weather\",\"input_schema\":{\"type\":\"object\","
        "\"properties\":{\"city\":{\"type\":\"string\"}}}},{\"type\":"
        "\"web_search_20250305\",\"name\":\"web_search\"}],\"tool_choice\":{"
        "\"type\":\"any\",\"disable_parallel_tool_use\":true},\"messages\":[{"
        "\"role\":\"user\",\"content\":\"weather?\"},{\"role\":\"assistant\","
        "\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\"},{\"type\":"
        "\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_w\",\"input\":{"
        "\"city\":\"Oslo\"}}]},{\"role\":\"user\",\"content\":[{\"type\":"
        "\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":[{\"type\":"
        "\"text\",\"text\":\"-3C\"}]},{\"type\":\"tool_result\","
        "\"tool_use_id\":\"toolu_2\",\"is_error\":true,\"content\":\"boom\"},"
        "{\"type\":\"text\",\"text\":\"thanks\"}]}]}",
        "{\"model\":\"local-model\",\"max_tokens\":10,\"tools\":[{\"type\":"
        "\"function\",\"function\":{\"name\":\"get_w\",\"description\":"
        "\"weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"city\":{\"type\":\"string\"}}}}}],\"tool_choice\":\"required\","
        "\"parallel_tool_calls\":false,\"messages\":[{\"role\":\"user\","
        "\"content\":\"weather?\"},{\"role\":\"assistant\",\"content\":null,"
        "\"tool_calls\":[{\"id\":\"toolu_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"get_w\",\"arguments\":"
        "\"{\\\"city\\\":\\\"Oslo\\\"}\"}}]},{\"role\":\"tool\","
        "\"tool_call_id\":\"toolu_1\",\"content\":\"-3C\"},{\"role\":\"tool\","
        "\"tool_call_id\":\"toolu_2\",\"content\":\"[error] boom\"},{\"role\":"
        "\"user\",\"content\":\"thanks\"}]}");
}

Test(gwa_request, tool_choice_named_and_images)
{
    request_is(
        "{\"model\":\"m\",\"tool_choice\":{\"type\":\"tool\",\"name\":\"t\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
        "\"source\":{\"type\":\"base64\",\"media_type\":\"image/jpeg\","
        "\"data\":\"QUJD\"}},{\"type\":\"text\",\"text\":\"what?\"}]}]}",
        "{\"model\":\"local-model\",\"tool_choice\":{\"type\":\"function\","
        "\"function\":{\"name\":\"t\"}},\"messages\":[{\"role\":\"user\","
        "\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
        "\"data:image/jpeg;base64,QUJD\"}},{\"type\":\"text\",\"text\":"
        "\"what?\"}]}]}");
}

Test(gwa_request, refuses_what_is_not_a_messages_request)
{
    static const char *const bad[] = {
        "{\"model\":\"m\"}",
        "{\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":5}]}",
        "{\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":"
        "\"tool_use\",\"input\":{}}]}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
        "\"tool_result\",\"content\":\"x\"}]}]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cJSON *in = parse(bad[i]), *out = NULL;
        struct fo_err err;
        cr_assert_eq(surf_gwa_request(in, "x", &out, &err), FO_E_INVALID, "%s",
                     bad[i]);
        cr_assert_null(out);
        cr_assert(err.msg[0]);
        cJSON_Delete(in);
    }
}

/* ---- answers ------------------------------------------------------------ */

static void response_is(const char *chat, const char *stops, const char *want)
{
    cJSON *in = parse(chat), *out = NULL, *w = parse(want);
    cJSON *st = stops ? parse(stops) : NULL;
    struct fo_err err;
    cr_assert_eq(surf_gwa_response(in, "claude-x", st, &out, &err), FO_OK, "%s",
                 err.msg);
    char *got = canon(out), *exp = canon(w);
    cr_assert_str_eq(got, exp);
    free(got);
    free(exp);
    cJSON_Delete(in);
    cJSON_Delete(out);
    cJSON_Delete(w);
    cJSON_Delete(st);
}

Test(gwa_response, text_and_usage)
{
    response_is("{\"id\":\"c1\",\"choices\":[{\"message\":{\"role\":"
                "\"assistant\",\"content\":\"hi\"},\"finish_reason\":\"stop\""
                "}],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}",
                NULL,
                "{\"id\":\"msg_c1\",\"type\":\"message\",\"role\":"
                "\"assistant\",\"model\":\"claude-x\",\"content\":[{\"type\":"
                "\"text\",\"text\":\"hi\"}],\"stop_reason\":\"end_turn\","
                "\"stop_sequence\":null,\"usage\":{\"input_tokens\":7,"
                "\"output_tokens\":3}}");
}

Test(gwa_response, tool_calls_become_tool_use_blocks)
{
    response_is(
        "{\"id\":\"c2\",\"choices\":[{\"message\":{\"role\":\"assistant\","
        "\"content\":\"let me look\",\"tool_calls\":[{\"id\":\"call_9\","
        "\"type\":\"function\",\"function\":{\"name\":\"get_w\","
        "\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}},{\"type\":"
        "\"function\",\"function\":{\"name\":\"now\",\"arguments\":\"not "
        "json\"}}]},\"finish_reason\":\"tool_calls\"}]}",
        NULL,
        "{\"id\":\"msg_c2\",\"type\":\"message\",\"role\":\"assistant\","
        "\"model\":\"claude-x\",\"content\":[{\"type\":\"text\",\"text\":"
        "\"let me look\"},{\"type\":\"tool_use\",\"id\":\"call_9\",\"name\":"
        "\"get_w\",\"input\":{\"city\":\"Oslo\"}},{\"type\":\"tool_use\","
        "\"id\":\"toolu_msg_c2_1\",\"name\":\"now\",\"input\":{}}],"
        "\"stop_reason\":\"tool_use\",\"stop_sequence\":null,\"usage\":{"
        "\"input_tokens\":0,\"output_tokens\":0}}");
}

static const char *stop_for(const char *choice, const char *stops)
{
    static char out[64];
    char chat[512];
    snprintf(chat, sizeof(chat),
             "{\"choices\":[{\"message\":{\"content\":\"x\"},%s}]}", choice);
    cJSON *in = parse(chat), *o = NULL, *st = stops ? parse(stops) : NULL;
    struct fo_err err;
    cr_assert_eq(surf_gwa_response(in, "m", st, &o, &err), FO_OK);
    snprintf(out, sizeof(out), "%s",
             cJSON_GetObjectItemCaseSensitive(o, "stop_reason")->valuestring);
    cJSON_Delete(in);
    cJSON_Delete(o);
    cJSON_Delete(st);
    return out;
}

Test(gwa_response, stop_reasons)
{
    cr_assert_str_eq(stop_for("\"finish_reason\":\"length\"", NULL),
                     "max_tokens");
    cr_assert_str_eq(stop_for("\"finish_reason\":\"stop\"", NULL), "end_turn");
    cr_assert_str_eq(stop_for("\"finish_reason\":null", NULL), "end_turn");
    cr_assert_str_eq(stop_for("\"finish_reason\":\"content_filter\"", NULL),
                     "refusal");
    cr_assert_str_eq(
        stop_for("\"finish_reason\":\"stop\",\"stop_reason\":\"END\"",
                 "[\"X\",\"END\"]"),
        "stop_sequence");
    /* a stop_reason the request did not ask for is not a stop sequence */
    cr_assert_str_eq(
        stop_for("\"finish_reason\":\"stop\",\"stop_reason\":\"END\"",
                 "[\"X\"]"),
        "end_turn");
}

Test(gwa_response, refuses_an_answer_without_a_message)
{
    cJSON *in = parse("{\"error\":\"x\"}"), *o = NULL;
    struct fo_err err;
    cr_assert_eq(surf_gwa_response(in, "m", NULL, &o, &err), FO_E_UPSTREAM);
    cJSON_Delete(in);
}

Test(gwa_response, errors_in_anthropic_shape)
{
    char *b = NULL;
    size_t len = 0;
    const char *up = "{\"error\":{\"message\":\"too fast\",\"type\":\"x\"}}";
    cr_assert_eq(surf_gwa_error_body(429, up, strlen(up), &b, &len), FO_OK);
    cr_assert_str_eq(b, "{\"error\":{\"message\":\"too fast\",\"type\":"
                        "\"rate_limit_error\"},\"type\":\"error\"}");
    free(b);
    cr_assert_eq(surf_gwa_error_body(503, "<html>", 6, &b, &len), FO_OK);
    cr_assert_str_eq(b, "{\"error\":{\"message\":\"the provider answered "
                        "503\",\"type\":\"api_error\"},\"type\":\"error\"}");
    free(b);
    cr_assert_str_eq(surf_gwa_error_type(401), "authentication_error");
    cr_assert_str_eq(surf_gwa_error_type(404), "not_found_error");
    cr_assert_str_eq(surf_gwa_error_type(529), "overloaded_error");
}

/* ---- streams ------------------------------------------------------------ */

/* Feeds the chat stream's event datas (NULL-terminated) and returns the
 * sequence of Anthropic event types, space separated, with the output. */
static char *feed(const char *const *events, const char *stops,
                  struct fo_buf *out, struct surf_gwa_stream *s)
{
    cJSON *st = stops ? parse(stops) : NULL;
    surf_gwa_stream_init(s, "claude-x", st);
    fo_buf_init(out, FO_BUF_UNLIMITED);
    for (size_t i = 0; events[i]; i++)
        cr_assert_eq(
            surf_gwa_stream_event(s, events[i], strlen(events[i]), out), FO_OK);
    s->stops = NULL;
    cJSON_Delete(st);
    struct fo_buf types;
    fo_buf_init(&types, FO_BUF_UNLIMITED);
    for (const char *p = out->data; p && (p = strstr(p, "event: ")); p++) {
        const char *e = strchr(p, '\n');
        if (types.len)
            fo_buf_putc(&types, ' ');
        fo_buf_append(&types, p + 7, (size_t)(e - p - 7));
    }
    return fo_buf_detach(&types, NULL);
}

Test(gwa_stream, text_then_finish_reason_usage_and_done)
{
    static const char *const ev[] = {
        "{\"id\":\"c7\",\"choices\":[{\"delta\":{\"role\":\"assistant\","
        "\"content\":\"\"}}]}",
        "{\"id\":\"c7\",\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}",
        "{\"id\":\"c7\",\"choices\":[{\"delta\":{\"content\":\"lo\"},"
        "\"finish_reason\":\"length\"}]}",
        "{\"id\":\"c7\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,"
        "\"completion_tokens\":2}}",
        "not json",
        "[DONE]",
        NULL};
    struct fo_buf out;
    struct surf_gwa_stream s;
    char *types = feed(ev, NULL, &out, &s);
    cr_assert_str_eq(types, "message_start content_block_start "
                            "content_block_delta content_block_delta "
                            "content_block_stop message_delta message_stop");
    cr_assert(strstr(out.data, "\"id\":\"msg_c7\""), "%s", out.data);
    cr_assert(strstr(out.data, "data: {\"delta\":{\"text\":\"Hel\",\"type\":"
                               "\"text_delta\"},\"index\":0,\"type\":"
                               "\"content_block_delta\"}\n\n"),
              "%s", out.data);
    cr_assert(strstr(out.data,
                     "event: message_delta\ndata: {\"delta\":{"
                     "\"stop_reason\":\"max_tokens\",\"stop_sequence\":null},"
                     "\"type\":\"message_delta\",\"usage\":{\"input_tokens\":"
                     "9,\"output_tokens\":2}}\n\n"),
              "%s", out.data);
    cr_assert(strstr(out.data, "event: message_stop\ndata: {\"type\":"
                               "\"message_stop\"}\n\n"));
    /* nothing after the end */
    size_t len = out.len;
    cr_assert_eq(surf_gwa_stream_event(&s, "[DONE]", 6, &out), FO_OK);
    cr_assert_eq(surf_gwa_stream_finish(&s, &out), FO_OK);
    cr_assert_eq(out.len, len);
    free(types);
    fo_buf_release(&out);
}

Test(gwa_stream, tool_calls_stream_as_input_json_deltas)
{
    static const char *const ev[] = {
        "{\"id\":\"c8\",\"choices\":[{\"delta\":{\"content\":\"Looking\"}}]}",
        "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":"
        "\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_w\","
        "\"arguments\":\"\"}}]}}]}",
        "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
        "{\"arguments\":\"{\\\"city\\\":\"}}]}}]}",
        "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
        "{\"arguments\":\"\\\"Oslo\\\"}\"}}]}}]}",
        "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":"
        "\"call_2\",\"function\":{\"name\":\"now\",\"arguments\":\"{}\"}}]}}"
        "]}",
        "{\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}",
        "[DONE]",
        NULL};
    struct fo_buf out;
    struct surf_gwa_stream s;
    char *types = feed(ev, NULL, &out, &s);
    cr_assert_str_eq(
        types, "message_start content_block_start content_block_delta "
               "content_block_stop content_block_start content_block_delta "
               "content_block_delta content_block_stop content_block_start "
               "content_block_delta content_block_stop message_delta "
               "message_stop");
    cr_assert(strstr(out.data, "{\"content_block\":{\"id\":\"call_1\","
                               "\"input\":{},\"name\":\"get_w\",\"type\":"
                               "\"tool_use\"},\"index\":1,\"type\":"
                               "\"content_block_start\"}"),
              "%s", out.data);
    cr_assert(strstr(out.data, "{\"delta\":{\"partial_json\":\"{\\\"city\\\""
                               ":\",\"type\":\"input_json_delta\"},\"index\":"
                               "1,\"type\":\"content_block_delta\"}"),
              "%s", out.data);
    cr_assert(strstr(out.data, "\"id\":\"call_2\""), "%s", out.data);
    cr_assert(strstr(out.data, "\"stop_reason\":\"tool_use\""), "%s", out.data);
    free(types);
    fo_buf_release(&out);
}

Test(gwa_stream, stop_sequence_and_an_end_without_done)
{
    static const char *const ev[] = {
        "{\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":"
        "\"stop\",\"stop_reason\":\"END\"}]}",
        NULL};
    struct fo_buf out;
    struct surf_gwa_stream s;
    char *types = feed(ev, "[\"END\"]", &out, &s);
    cr_assert_str_eq(types, "message_start content_block_start "
                            "content_block_delta");
    free(types);
    cr_assert_eq(surf_gwa_stream_finish(&s, &out), FO_OK);
    cr_assert(strstr(out.data, "\"stop_reason\":\"stop_sequence\","
                               "\"stop_sequence\":\"END\""),
              "%s", out.data);
    cr_assert(strstr(out.data, "event: message_stop"));
    fo_buf_release(&out);
}

Test(gwa_stream, hostile_chunks_are_skipped_not_trusted)
{
    static const char *const ev[] = {
        "[1,2]",
        "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1e300,"
        "\"function\":{\"name\":\"x\"}},{\"index\":-1},{\"index\":\"0\"}]}}],"
        "\"usage\":{\"prompt_tokens\":1e300,\"completion_tokens\":-5}}",
        "{\"choices\":\"no\"}",
        "{\"choices\":[{\"delta\":{\"content\":5,\"tool_calls\":{}}}]}",
        "[DONE]",
        NULL};
    struct fo_buf out;
    struct surf_gwa_stream s;
    char *types = feed(ev, NULL, &out, &s);
    cr_assert_str_eq(types, "message_start message_delta message_stop");
    cr_assert(strstr(out.data, "\"usage\":{\"input_tokens\":0,"
                               "\"output_tokens\":0}"),
              "%s", out.data);
    free(types);
    fo_buf_release(&out);
}
