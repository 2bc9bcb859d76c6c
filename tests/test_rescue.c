/* test_rescue: the forge layer of the tool loop. The rescue parser alone
 * (each form, braces and tags inside strings, several calls, a tool not
 * offered, garbage), then end to end with the scripted model: a call
 * written as text runs, the respond tool ends the loop, malformed calls
 * are retried a bounded number of times. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch_model.h"
#include "daemon/orch_rescue.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "testutil.h"
#include "tu_scene.h"

/* ---- the parser ----------------------------------------------------------
 */

static const char *const tools[] = {"read_file", "write_file", "run_command",
                                    "respond"};

static void scan(const char *text, struct orch_rescue *rs)
{
    struct fo_err err;
    cr_assert_eq(
        orch_rescue_scan(text, strlen(text), tools, 4, "rescued-1-", rs, &err),
        FO_OK);
}

/* call i of rs: its name and arguments (canonical JSON) */
static void assert_call(const struct orch_rescue *rs, int i, const char *name,
                        const char *args, const char *form)
{
    const cJSON *c = cJSON_GetArrayItem(rs->calls, i);
    cr_assert_not_null(c, "no call %d", i);
    cr_assert_str_eq(tu_str(c, "name"), name);
    cr_assert_str_eq(tu_str(c, "arguments"), args);
    cr_assert_str_eq(tu_str(c, "rescued"), form);
    char id[32];
    snprintf(id, sizeof(id), "rescued-1-%d", i + 1);
    cr_assert_str_eq(tu_str(c, "id"), id);
}

Test(rescue, a_tool_call_tag_becomes_a_call_and_leaves_the_text)
{
    struct orch_rescue rs;
    scan("I will write it.\n<tool_call>\n{\"name\": \"write_file\", "
         "\"arguments\": {\"path\": \"a.txt\", \"content\": \"x\"}}\n"
         "</tool_call>\nThen check.",
         &rs);
    cr_assert_eq(cJSON_GetArraySize(rs.calls), 1);
    assert_call(&rs, 0, "write_file", "{\"content\":\"x\",\"path\":\"a.txt\"}",
                "tool_call_tag");
    cr_assert_str_eq(rs.text, "I will write it.\n\nThen check.");
    cr_assert_null(rs.refused);
    cr_assert_null(rs.malformed);
    orch_rescue_release(&rs);
}

Test(rescue, braces_and_closing_tags_inside_strings_do_not_end_the_call)
{
    struct orch_rescue rs;
    scan("<tool_call>{\"name\": \"write_file\", \"arguments\": {\"path\": "
         "\"b}.c\", \"content\": \"int main() { return '}'; }\\n"
         "</tool_call> \\\"}\"}}</tool_call>",
         &rs);
    cr_assert_eq(cJSON_GetArraySize(rs.calls), 1);
    cJSON *a = NULL;
    const char *args = tu_str(cJSON_GetArrayItem(rs.calls, 0), "arguments");
    cr_assert_eq(fo_json_parse(args, strlen(args), &a, NULL), FO_OK);
    cr_assert_str_eq(tu_str(a, "path"), "b}.c");
    cr_assert_str_eq(tu_str(a, "content"),
                     "int main() { return '}'; }\n</tool_call> \"}");
    cJSON_Delete(a);
    cr_assert_str_eq(rs.text, "");
    orch_rescue_release(&rs);
}

Test(rescue, several_calls_in_order_and_an_unclosed_last_tag)
{
    struct orch_rescue rs;
    scan("<tool_call>{\"name\":\"read_file\",\"arguments\":{\"path\":\"a\"}}"
         "</tool_call>\n<tool_call>{\"tool\":\"read_file\",\"args\":"
         "\"{\\\"path\\\":\\\"b\\\"}\"}</tool_call>\n<tool_call>\n"
         "{\"name\":\"run_command\",\"arguments\":{\"argv\":[\"ls\"]}}\n",
         &rs);
    cr_assert_eq(cJSON_GetArraySize(rs.calls), 3);
    assert_call(&rs, 0, "read_file", "{\"path\":\"a\"}", "tool_call_tag");
    assert_call(&rs, 1, "read_file", "{\"path\":\"b\"}", "tool_call_tag");
    assert_call(&rs, 2, "run_command", "{\"argv\":[\"ls\"]}", "tool_call_tag");
    cr_assert_str_eq(rs.text, "");
    orch_rescue_release(&rs);
}

Test(rescue, function_tags_with_json_or_parameters)
{
    struct orch_rescue rs;
    scan("<function=read_file>{\"path\": \"x\"}</function> and "
         "<tool_call>\n<function=write_file>\n<parameter=path>\ny.txt\n"
         "</parameter>\n<parameter=content>\n{ not json\n</parameter>\n"
         "</function>\n</tool_call> and <function=run_command>"
         "<parameter=argv>[\"echo\", \"}\"]</parameter></function>",
         &rs);
    cr_assert_eq(cJSON_GetArraySize(rs.calls), 3, "%d",
                 cJSON_GetArraySize(rs.calls));
    assert_call(&rs, 0, "read_file", "{\"path\":\"x\"}", "function_tag");
    assert_call(&rs, 1, "write_file",
                "{\"content\":\"{ not json\",\"path\":\"y.txt\"}",
                "function_tag");
    assert_call(&rs, 2, "run_command", "{\"argv\":[\"echo\",\"}\"]}",
                "function_tag");
    cr_assert_str_eq(rs.text, "and  and");
    orch_rescue_release(&rs);
}

Test(rescue, fenced_blocks_and_a_bare_object_only_when_exactly_a_call)
{
    struct orch_rescue rs;
    scan("Here:\n```json\n{\"name\": \"read_file\", \"arguments\": "
         "{\"path\": \"a\"}}\n```\nand\n```tool_call\n{\"tool\": "
         "\"write_file\", \"args\": {\"path\": \"b\", \"content\": \"\"}}\n"
         "```\nbut not\n```json\n{\"name\": \"read_file\", \"arguments\": "
         "{}, \"extra\": 1}\n```\n",
         &rs);
    cr_assert_eq(cJSON_GetArraySize(rs.calls), 2);
    assert_call(&rs, 0, "read_file", "{\"path\":\"a\"}", "fenced_block");
    assert_call(&rs, 1, "write_file", "{\"content\":\"\",\"path\":\"b\"}",
                "fenced_block");
    cr_assert(strstr(rs.text, "\"extra\": 1"), "%s", rs.text);
    cr_assert(!strstr(rs.text, "\"path\": \"a\""), "%s", rs.text);
    orch_rescue_release(&rs);

    scan("  {\"name\": \"respond\", \"arguments\": {\"answer\": \"42\"}}\n",
         &rs);
    cr_assert_eq(cJSON_GetArraySize(rs.calls), 1);
    assert_call(&rs, 0, "respond", "{\"answer\":\"42\"}", "bare_json");
    orch_rescue_release(&rs);

    /* JSON that is an answer, not a call, stays text */
    scan("{\"name\": \"Alice\", \"age\": 3}", &rs);
    cr_assert_null(rs.calls);
    cr_assert_null(rs.refused);
    cr_assert_null(rs.malformed);
    scan("The call was {\"name\": \"read_file\", \"arguments\": {}} today",
         &rs);
    cr_assert_null(rs.calls, "a call object in prose is not a call");
    orch_rescue_release(&rs);
}

Test(rescue, a_tool_not_offered_is_refused_and_stays_in_the_text)
{
    struct orch_rescue rs;
    scan("<tool_call>{\"name\": \"delete_everything\", \"arguments\": {}}"
         "</tool_call>",
         &rs);
    cr_assert_null(rs.calls);
    cr_assert_null(rs.text);
    cr_assert_eq(cJSON_GetArraySize(rs.refused), 1);
    const cJSON *r = cJSON_GetArrayItem(rs.refused, 0);
    cr_assert_str_eq(tu_str(r, "tool"), "delete_everything");
    cr_assert_str_eq(tu_str(r, "form"), "tool_call_tag");
    cr_assert_str_eq(tu_str(r, "reason"), "not_offered");
    orch_rescue_release(&rs);
    /* beside a good one: the good one is taken, the other stays */
    scan("<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": "
         "\"a\"}}</tool_call> <function=rm>{}</function>",
         &rs);
    cr_assert_eq(cJSON_GetArraySize(rs.calls), 1);
    cr_assert_eq(cJSON_GetArraySize(rs.refused), 1);
    cr_assert_str_eq(rs.text, "<function=rm>{}</function>");
    orch_rescue_release(&rs);
}

Test(rescue, garbage_is_malformed_in_a_tag_and_text_elsewhere)
{
    static const char *const bad[] = {
        "<tool_call>{\"name\": \"write_file\", \"arguments\": {\"path\": "
        "\"x\"</tool_call>",
        "<tool_call>not json</tool_call>",
        "<tool_call>{\"name\": \"write_file\", \"arguments\": [1]}</tool_call>",
        "<tool_call>{\"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"read_file\", \"arguments\": {}} trailing "
        "words</tool_call>",
        "<function=write_file>{\"path\": }</function>",
        "<function=write_file><parameter=path>x</function>",
        "<tool_call>",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct orch_rescue rs;
        scan(bad[i], &rs);
        cr_assert_null(rs.calls, "case %zu made a call", i);
        cr_assert_eq(cJSON_GetArraySize(rs.malformed), 1, "case %zu", i);
        cr_assert_gt(
            strlen(tu_str(cJSON_GetArrayItem(rs.malformed, 0), "error")), 10);
        orch_rescue_release(&rs);
    }
    static const char *const text[] = {
        "",
        "just words",
        "{",
        "}}}{{{",
        "```json\n{\"name\": \"read_file\"",
        "<function=>",
        "<tool_call",
        "```\n```",
        "{\"name\": 3, \"args\": {}}",
    };
    for (size_t i = 0; i < sizeof(text) / sizeof(text[0]); i++) {
        struct orch_rescue rs;
        scan(text[i], &rs);
        cr_assert_null(rs.calls, "text %zu", i);
        cr_assert_null(rs.malformed, "text %zu", i);
        cr_assert_null(rs.refused, "text %zu", i);
        orch_rescue_release(&rs);
    }
}

Test(rescue, a_bad_tag_is_reported_once_and_hostile_text_is_read_once)
{
    struct orch_rescue rs;
    scan("<tool_call>\n<function=write_file>{\"path\": </function>\n"
         "</tool_call> then <tool_call>{\"name\": \"read_file\", "
         "\"arguments\": {\"path\": \"a\"}}</tool_call>",
         &rs);
    cr_assert_eq(cJSON_GetArraySize(rs.malformed), 1);
    cr_assert_eq(cJSON_GetArraySize(rs.calls), 1, "the good call after it");
    orch_rescue_release(&rs);
    /* tags whose object never closes, each reading to the end: the scan
     * stops after a bounded number of them */
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    while (b.len < ORCH_RESCUE_TEXT_MAX - 64)
        fo_buf_puts(&b, "<tool_call>{\"a\": \"</tool_call>");
    scan(b.data, &rs);
    cr_assert_null(rs.calls);
    cr_assert_gt(cJSON_GetArraySize(rs.malformed), 0);
    cr_assert_leq(cJSON_GetArraySize(rs.malformed), 4 * ORCH_RESCUE_CALLS_MAX);
    orch_rescue_release(&rs);
    /* over the limit: not scanned at all */
    fo_buf_puts(&b, "<tool_call>{\"name\": \"read_file\", \"arguments\": "
                    "{}}</tool_call>");
    while (b.len <= ORCH_RESCUE_TEXT_MAX)
        fo_buf_puts(&b, "padding ");
    scan(b.data, &rs);
    cr_assert_null(rs.calls);
    cr_assert_null(rs.malformed);
    orch_rescue_release(&rs);
    fo_buf_release(&b);
}

Test(rescue, at_most_sixteen_calls_are_taken_from_one_reply)
{
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    for (int i = 0; i < 20; i++)
        fo_buf_puts(&b, "<tool_call>{\"name\":\"read_file\",\"arguments\":"
                        "{\"path\":\"a\"}}</tool_call>");
    struct orch_rescue rs;
    scan(b.data, &rs);
    cr_assert_eq(cJSON_GetArraySize(rs.calls), ORCH_RESCUE_CALLS_MAX);
    cr_assert_eq(cJSON_GetArraySize(rs.refused), 20 - ORCH_RESCUE_CALLS_MAX);
    orch_rescue_release(&rs);
    fo_buf_release(&b);
}

Test(rescue, the_respond_answer_must_be_a_string)
{
    char why[200];
    char *a =
        orch_rescue_respond_answer("{\"answer\": \"yes\"}", why, sizeof(why));
    cr_assert_str_eq(a, "yes");
    free(a);
    cr_assert_null(
        orch_rescue_respond_answer("{\"answer\": 5}", why, sizeof(why)));
    cr_assert(strstr(why, "must be a string"), "%s", why);
    cr_assert_null(orch_rescue_respond_answer("{", why, sizeof(why)));
    cr_assert(strstr(why, "not JSON"), "%s", why);
}

Test(rescue, provider_options_are_parsed_and_checked)
{
    static const char cfg[] =
        "{\"providers\": [{\"api\": \"chat\", \"url\": \"http://127.0.0.1:1\","
        " \"model\": \"m\", \"tier\": \"cheap\", \"rescue\": false, "
        "\"respond_tool\": true, \"malformed_retries\": 0}, {\"api\": "
        "\"chat\", \"url\": \"http://127.0.0.1:1\", \"model\": \"n\"}]}";
    cJSON *j = cJSON_Parse(cfg);
    struct orch_model_config mc;
    struct orch_model_provider *pv = NULL;
    struct fo_err err;
    cr_assert_eq(orch_model_config_parse(j, &mc, &pv, &err), FO_OK, "%s",
                 err.msg);
    struct orch_model *m = NULL;
    cr_assert_eq(orch_model_create(&mc, &m, &err), FO_OK, "%s", err.msg);
    struct orch_forge fo;
    orch_model_forge(m, ORCH_EXEC_CHAT, ORCH_TIER_CHEAP, NULL, &fo);
    cr_assert_eq(fo.rescue, 0);
    cr_assert_eq(fo.respond_tool, 1);
    cr_assert_eq(fo.malformed_retries, 0);
    orch_model_forge(m, ORCH_EXEC_CHAT, ORCH_TIER_CAPABLE, NULL, &fo);
    cr_assert_eq(fo.rescue, 1, "the defaults");
    cr_assert_eq(fo.respond_tool, 0);
    cr_assert_eq(fo.malformed_retries, ORCH_MALFORMED_RETRIES_DEFAULT);
    orch_model_forge(m, ORCH_EXEC_CHAT, ORCH_TIER_CAPABLE, "m", &fo);
    cr_assert_eq(fo.rescue, 0, "by the provider that answered");
    orch_model_free(m);
    free(pv);
    cJSON_Delete(j);
    static const char *const bad[] = {
        "{\"providers\": [{\"api\": \"chat\", \"model\": \"m\", \"rescue\": "
        "1}]}",
        "{\"providers\": [{\"api\": \"chat\", \"model\": \"m\", "
        "\"respond_tool\": \"yes\"}]}",
        "{\"providers\": [{\"api\": \"chat\", \"model\": \"m\", "
        "\"malformed_retries\": 21}]}",
    };
    for (size_t i = 0; i < 3; i++) {
        j = cJSON_Parse(bad[i]);
        pv = NULL;
        cr_assert_eq(orch_model_config_parse(j, &mc, &pv, &err), FO_E_INVALID,
                     "case %zu", i);
        cr_assert(strstr(err.msg, i == 0   ? "rescue"
                                  : i == 1 ? "respond_tool"
                                           : "malformed_retries"),
                  "%s", err.msg);
        cJSON_Delete(j);
    }
}

/* ---- end to end, with the scripted model ---------------------------------
 */

/* forum.json in the scene's data dir: one chat provider at the fake with
 * the given extra members ("" for none). */
static void scene_config_api(const struct scene *sc, const char *api,
                             const char *extra)
{
    char cfg[600], path[700];
    snprintf(cfg, sizeof(cfg),
             "{\"models\":{\"providers\":[{\"api\":\"%s\",\"url\":\"%s\","
             "\"model\":\"m1\"%s%s}]}}",
             api, sc->url, extra[0] ? "," : "", extra);
    snprintf(path, sizeof(path), "%s/forum.json", sc->dir);
    cr_assert_eq(tu_write_file(path, cfg, strlen(cfg)), 0);
}

static void scene_config(const struct scene *sc, const char *extra)
{
    scene_config_api(sc, "chat", extra);
}

static struct tu_run scene_submit(const struct scene *sc, const char *calls)
{
    return tu_forumv(NULL, "--ledger", sc->dir, "--json", "submit", "edit",
                     "the", "file", "--roster", sc->rpath, "--workspace",
                     sc->ws, "--max-model-calls", calls, NULL);
}

/* A small local model's habit: the call written as text, then an answer
 * once the tool's result came back. */
static const char *text_caller(struct fake *f, const char *role, int n,
                               const char *model, const char *prompt)
{
    (void)f, (void)model;
    if (tu_scene_control(role))
        return tu_scene_control(role);
    if (n == 0)
        return "I will write the file.\n<tool_call>\n{\"name\": "
               "\"write_file\", \"arguments\": {\"path\": \"out.txt\", "
               "\"content\": \"HELLO } </tool_call>\\n\"}}\n</tool_call>";
    return strstr(prompt, "out.txt") ? "out.txt is written"
                                     : "the write was not reported";
}

/* an Anthropic lane: the scene's roster with executor "anthropic" */
static const char anthropic_roster[] =
    "{\"lanes\":[{\"name\":\"coder\",\"category\":\"engineering\","
    "\"domain\":\"edits files\",\"keywords\":[\"edit\",\"file\"],"
    "\"model_tier\":\"capable\",\"executor\":\"anthropic\",\"tools\":["
    "\"read_file\",\"write_file\"],\"max_turns\":16}]}";

static void text_call_run(int anthropic)
{
    struct scene sc;
    tu_scene_open(&sc, text_caller, anthropic ? anthropic_roster : NULL);
    scene_config_api(&sc, anthropic ? "anthropic" : "chat", "");
    struct tu_run run = scene_submit(&sc, "20");
    cr_assert_eq(run.status, 0, "%s", run.err);
    tu_run_free(&run);
    char path[700];
    snprintf(path, sizeof(path), "%s/out.txt", sc.ws);
    char *got = tu_read_file(path, NULL);
    cr_assert_not_null(got, "the file was not written");
    cr_assert_str_eq(got, "HELLO } </tool_call>\n");
    free(got);
    cr_assert_eq(sc.f->count[R_TASK], 2, "%d task turns", sc.f->count[R_TASK]);
    /* the call is witnessed as rescued, with the text around it */
    char *calls = tu_scene_bodies(sc.dir, "tool_call");
    cr_assert(strstr(calls, "\"rescued\":\"tool_call_tag\"") &&
                  strstr(calls, "\"tool\":\"write_file\"") &&
                  strstr(calls, "\"call_id\":\"rescued-1-1\"") &&
                  strstr(calls, "\"text\":\"I will write the file.\""),
              "%s", calls);
    free(calls);
    /* the first turn was not the answer: the second was */
    char *res = tu_scene_bodies(sc.dir, "result");
    cr_assert(strstr(res, "\"output\":\"out.txt is written\"") &&
                  strstr(res, "\"stop_reason\":\"answer\"") &&
                  strstr(res, "\"turns\":2") && strstr(res, "\"tool_calls\":1"),
              "%s", res);
    cr_assert_null(strstr(res, "<tool_call>"), "%s", res);
    free(res);
    cr_assert_eq(sc.f->anthropic > 0, anthropic, "the API spoken");
    tu_scene_close(&sc);
}

Test(forge, a_tool_call_written_as_text_runs_and_the_loop_goes_on,
     .timeout = 60)
{
    text_call_run(0);
}

Test(forge, an_anthropic_models_text_call_is_rescued_the_same, .timeout = 60)
{
    text_call_run(1);
}

/* the same model, with "rescue": false: its text is the answer */
Test(forge, rescue_false_takes_the_text_as_the_answer, .timeout = 60)
{
    struct scene sc;
    tu_scene_open(&sc, text_caller, NULL);
    scene_config(&sc, "\"rescue\":false");
    struct tu_run run = scene_submit(&sc, "20");
    cr_assert_eq(run.status, 0, "%s", run.err);
    tu_run_free(&run);
    char path[700];
    snprintf(path, sizeof(path), "%s/out.txt", sc.ws);
    cr_assert_null(tu_read_file(path, NULL), "the file was written");
    cr_assert_eq(sc.f->count[R_TASK], 1);
    struct tu_entries k;
    tu_scene_entries(sc.dir, &k);
    cr_assert_eq(tu_scene_count(&k, "tool_call"), 0);
    tu_scene_close(&sc);
}

static const char *unknown_caller(struct fake *f, const char *role, int n,
                                  const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt, (void)n;
    if (tu_scene_control(role))
        return tu_scene_control(role);
    return "<tool_call>{\"name\": \"delete_everything\", \"arguments\": "
           "{\"path\": \"/\"}}</tool_call>";
}

Test(forge, a_call_to_a_tool_not_offered_is_refused_and_witnessed,
     .timeout = 60)
{
    struct scene sc;
    tu_scene_open(&sc, unknown_caller, NULL);
    struct tu_run run = tu_forumv(
        NULL, "--ledger", sc.dir, "--json", "submit", "edit", "the", "file",
        "--roster", sc.rpath, "--workspace", sc.ws, "--chat-url", sc.url,
        "--model", "m1", "--max-model-calls", "20", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    tu_run_free(&run);
    struct tu_entries k;
    tu_scene_entries(sc.dir, &k);
    cr_assert_eq(tu_scene_count(&k, "tool_call"), 0);
    char *res = tu_scene_bodies(sc.dir, "result");
    cr_assert(strstr(res, "\"stop_reason\":\"answer\"") &&
                  strstr(res, "\"rescue_refused\":[{\"form\":"
                              "\"tool_call_tag\",\"reason\":\"not_offered\","
                              "\"tool\":\"delete_everything\"}]") &&
                  strstr(res, "delete_everything"),
              "%s", res);
    free(res);
    tu_scene_close(&sc);
}

/* write, a respond call with a bad answer, then respond written as text */
static const char *responder(struct fake *f, const char *role, int n,
                             const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt;
    if (tu_scene_control(role))
        return tu_scene_control(role);
    switch (n) {
    case 0:
        return "CALL write_file {\"path\":\"a.txt\",\"content\":\"A\"}";
    case 1:
        return "CALL respond {\"answer\": 5}";
    default:
        return "<tool_call>{\"name\": \"respond\", \"arguments\": "
               "{\"answer\": \"a.txt holds A\"}}</tool_call>";
    }
}

Test(forge, the_respond_tool_ends_the_loop_with_its_answer, .timeout = 60)
{
    struct scene sc;
    tu_scene_open(&sc, responder, NULL);
    scene_config(&sc, "\"respond_tool\":true");
    struct tu_run run = scene_submit(&sc, "20");
    cr_assert_eq(run.status, 0, "%s", run.err);
    tu_run_free(&run);
    cr_assert_eq(sc.f->count[R_TASK], 3, "%d", sc.f->count[R_TASK]);
    cr_assert(strstr(sc.f->seen, "\"name\":\"respond\""),
              "the respond tool was not offered");
    cr_assert(strstr(sc.f->seen, "call the respond tool"),
              "the system text does not say so");
    cr_assert(strstr(sc.f->seen, "\\\"answer\\\" must be a string"),
              "the bad call's reason was not fed back");
    /* the good respond never became a call to run: the bad one did */
    char *calls = tu_scene_bodies(sc.dir, "tool_call");
    cr_assert(strstr(calls, "\"tool\":\"write_file\""), "%s", calls);
    cr_assert(strstr(calls, "\"arguments\":\"{\\\"answer\\\": 5}\""), "%s",
              calls);
    cr_assert_null(strstr(calls, "a.txt holds A"), "%s", calls);
    free(calls);
    char *res = tu_scene_bodies(sc.dir, "result");
    cr_assert(strstr(res, "\"output\":\"a.txt holds A\"") &&
                  strstr(res, "\"answer_via\":\"respond\"") &&
                  strstr(res, "\"rescued\":\"tool_call_tag\"") &&
                  strstr(res, "\"stop_reason\":\"answer\"") &&
                  strstr(res, "\"tool_calls\":2"),
              "%s", res);
    free(res);
    tu_scene_close(&sc);
}

/* without "respond_tool", respond is no tool of the lane */
Test(forge, respond_is_not_offered_unless_the_provider_opts_in, .timeout = 60)
{
    struct scene sc;
    tu_scene_open(&sc, responder, NULL);
    scene_config(&sc, "");
    struct tu_run run = scene_submit(&sc, "20");
    tu_run_free(&run);
    cr_assert_null(strstr(sc.f->seen, "Give your final answer and end"),
                   "the respond tool was offered");
    cr_assert(strstr(sc.f->seen, "unknown tool \\\"respond\\\""),
              "the call was not refused as an unknown tool");
    char *res = tu_scene_bodies(sc.dir, "result");
    cr_assert_null(strstr(res, "answer_via"), "%s", res);
    free(res);
    tu_scene_close(&sc);
}

/* a call written as text that never parses; the validator fails it */
static const char *garbled(struct fake *f, const char *role, int n,
                           const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt, (void)n;
    if (!strcmp(role, "validator"))
        return "{\"pass\": false, \"reason\": \"no\"}";
    if (tu_scene_control(role))
        return tu_scene_control(role);
    return "<tool_call>{\"name\": \"write_file\", \"arguments\": {\"path\": "
           "\"x\", </tool_call>";
}

Test(forge, malformed_calls_are_retried_with_the_reason_then_fail,
     .timeout = 60)
{
    struct scene sc;
    tu_scene_open(&sc, garbled, NULL);
    scene_config(&sc, "\"malformed_retries\":1");
    struct tu_run run = scene_submit(&sc, "40");
    tu_run_free(&run);
    /* two turns an attempt: the first answered with the reason, the
     * second ends it (the failed verdict may escalate it a tier) */
    cr_assert_gt(sc.f->count[R_TASK], 0);
    cr_assert_eq(sc.f->count[R_TASK] % 2, 0, "%d turns", sc.f->count[R_TASK]);
    cr_assert(strstr(sc.f->seen, "your tool call could not be read: the "
                                 "JSON object in <tool_call> is not closed"),
              "the reason was not fed back");
    char *resc = tu_scene_bodies(sc.dir, "tool_rescue");
    cr_assert(strstr(resc, "\"reason\":\"malformed_tool_call\"") &&
                  strstr(resc, "\"rescue_malformed\":[{\"error\":"),
              "%s", resc);
    free(resc);
    char *res = tu_scene_bodies(sc.dir, "result");
    cr_assert(strstr(res, "\"stop_reason\":\"malformed_tool_calls\"") &&
                  strstr(res, "(malformed_retries: 1)") &&
                  strstr(res, "\"turns\":2") && strstr(res, "\"ok\":false"),
              "%s", res);
    free(res);
    tu_scene_close(&sc);
}

/* calls the model makes itself with arguments that are not JSON: with
 * "malformed_retries": 0 the first one ends the task */
static const char *bad_native(struct fake *f, const char *role, int n,
                              const char *model, const char *prompt)
{
    (void)f, (void)model, (void)prompt, (void)n;
    if (!strcmp(role, "validator"))
        return "{\"pass\": false, \"reason\": \"no\"}";
    if (tu_scene_control(role))
        return tu_scene_control(role);
    return "CALL write_file {\"path\": \"x\", ";
}

Test(forge, malformed_retries_bounds_native_calls_too, .timeout = 60)
{
    struct scene sc;
    tu_scene_open(&sc, bad_native, NULL);
    scene_config(&sc, "\"malformed_retries\":0");
    struct tu_run run = scene_submit(&sc, "8");
    tu_run_free(&run);
    char *res = tu_scene_bodies(sc.dir, "result");
    cr_assert(strstr(res, "\"stop_reason\":\"malformed_tool_calls\"") &&
                  strstr(res, "\"turns\":1") && strstr(res, "\"tool_calls\":1"),
              "%s", res);
    free(res);
    tu_scene_close(&sc);
}
